/* Kokoro-82M internals shared by the loader, the blocks and the forward pass.
 *
 * Layouts: sequences are channels-first [C, T] for convolutions and norms over
 * time, time-first [T, C] for LSTMs and linear layers; each buffer's comment
 * says which. Weight arrays marked f32 are owned by the model (converted and
 * weight-norm folded at load); choir_weight matrices may point into the
 * mapped checkpoint. */
#ifndef CHOIR_KOKORO_INTERNAL_H
#define CHOIR_KOKORO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "choir/arena.h"
#include "choir/backend.h"
#include "choir/kernels.h"
#include "choir/kokoro.h"
#include "choir/safetensors.h"
#include "choir/tensor.h"

#define KK_STYLE 128 /* each half of a voice-pack row */
#define KK_HIDDEN 512
#define KK_BERT 768
#define KK_BERT_EMB 128
#define KK_BERT_HEADS 12
#define KK_BERT_FF 2048
#define KK_BERT_LAYERS 12
#define KK_NTOKEN 178
#define KK_MAX_DUR 50
#define KK_NFFT 20
#define KK_HOP 5
#define KK_NBINS 11
#define KK_HARMONICS 9

typedef struct kk_linear {
    choir_weight w;        /* [out, in], any storage */
    const float *b;        /* [out] f32 or NULL */
} kk_linear;

typedef struct kk_conv {
    const float *w;        /* Conv1d [out, in/groups, k]; ConvTranspose1d [in, out/groups, k] */
    const float *b;        /* [out] or NULL */
    int cin, cout, k;
} kk_conv;

typedef struct kk_lstm {   /* bidirectional, one layer; [0] forward, [1] reverse */
    const float *w_ih[2];  /* [4H, In] */
    const float *w_hh[2];  /* [4H, H] */
    const float *b_ih[2], *b_hh[2]; /* [4H] */
    int in, h;
} kk_lstm;

typedef struct kk_adain {  /* AdaIN1d / AdaLayerNorm: fc(style) -> gamma, beta */
    kk_linear fc;          /* [2C, 128] */
    const float *norm_w;   /* [C] instance-norm affine, or NULL (identity) */
    const float *norm_b;   /* [C] or NULL */
    int C;
} kk_adain;

typedef struct kk_resblk {  /* AdainResBlk1d */
    int cin, cout;
    bool upsample;
    kk_adain norm1, norm2;
    kk_conv conv1, conv2;  /* k3 p1 */
    kk_conv conv1x1;       /* only when cin != cout (w == NULL otherwise); no bias */
    kk_conv pool;          /* only when upsample: depthwise ConvTranspose1d k3 s2 [cin,1,3] */
} kk_resblk;

typedef struct kk_snakeblock { /* AdaINResBlock1 (generator) */
    int C, k;
    kk_conv convs1[3], convs2[3];
    kk_adain adain1[3], adain2[3];
    const float *alpha1[3], *alpha2[3]; /* [C] */
} kk_snakeblock;

typedef struct kk_embedding {
    choir_weight w;        /* [rows, dim]; rows gathered with choir_weight_row_f32 */
} kk_embedding;

struct choir_kokoro {
    /* ALBERT (one shared layer applied KK_BERT_LAYERS times) */
    kk_embedding word_emb, pos_emb, type_emb; /* [178,128], [512,128], [2,128] */
    const float *emb_ln_w, *emb_ln_b;          /* [128] */
    kk_linear map_in;                          /* [768,128] */
    kk_linear q, k, v, dense;                  /* [768,768] */
    const float *att_ln_w, *att_ln_b;          /* [768] */
    kk_linear ffn, ffn_out;                    /* [2048,768], [768,2048] */
    const float *full_ln_w, *full_ln_b;        /* [768] */
    kk_linear bert_encoder;                    /* [512,768] */

    /* prosody predictor */
    kk_lstm dur_lstm[3];                       /* In 640, H 256 */
    kk_adain dur_norm[3];                      /* AdaLayerNorm, C = 512 */
    kk_lstm pred_lstm;                         /* predictor.lstm */
    kk_linear dur_proj;                        /* [50,512] */
    kk_lstm shared;                            /* predictor.shared */
    kk_resblk f0_blk[3], n_blk[3];
    kk_conv f0_proj, n_proj;                   /* [1,256,1] */

    /* text encoder */
    kk_embedding te_emb;                       /* [178,512] */
    kk_conv te_cnn[3];                         /* [512,512,5] */
    const float *te_ln_g[3], *te_ln_b[3];      /* [512] */
    kk_lstm te_lstm;                           /* In 512, H 256 */

    /* decoder */
    kk_conv f0_conv, n_conv;                   /* [1,1,3] stride 2 */
    kk_conv asr_res;                           /* [64,512,1] */
    kk_resblk encode;                          /* 514 -> 1024 */
    kk_resblk decode[4];                       /* 1090 -> 1024 (x3), 1090 -> 512 upsample */

    /* generator (iSTFTNet) */
    kk_linear l_linear;                        /* [1,9] */
    kk_conv noise_convs[2];                    /* [256,22,12] s6 p3; [128,22,1] */
    kk_snakeblock noise_res[2];                /* (256,k7), (128,k11) */
    kk_conv ups[2];                            /* [512,256,20] s10 p5; [256,128,12] s6 p3 */
    kk_snakeblock resblocks[6];                /* 256 x k{3,7,11}, 128 x k{3,7,11} */
    kk_conv conv_post;                         /* [22,128,7] p3 */

    /* vocabulary: code point -> id (0 = absent), for code points < 0x10000 */
    uint8_t *vocab;                            /* [65536] */

    /* ownership */
    choir_st *st;                              /* mapped safetensors, or NULL */
    struct choir_pth *pth;                     /* opened .pth archive, or NULL */
    void **owned;                              /* f32 arrays made at load */
    int n_owned, cap_owned;
    int64_t weight_bytes;

    /* The executor that runs the network (kokoro_exec.c) when one is
     * attached (choir_kokoro_set_gpu: a CUDA backend); NULL: each call gets
     * the model's host executor. Not owned. */
    struct kk_exec *exec;
    /* The CPU executor (kokoro_exec.c), made at load: the forward objects
     * over the model's own arrays (nothing copied), read-only, so any number
     * of threads run on it at once, each call on a stream of its own. */
    struct kk_exec *host;
};

/* --- per-call workspace ------------------------------------------------- */

/* Scratch memory of one forward pass: blocks are handed out in order and all
 * freed together. A mark/release pair scopes a block's temporaries.
 *
 * A workspace is either an arena of its own (kk_ws_create, freed with
 * kk_ws_free), or a view of the call's memory (kk_ws_over): the batch arena
 * the caller gave (choir_kokoro_params.arena) from its current fill level,
 * and the call's host stream over it (`s`, which every network stage of the
 * call then runs on; NULL on a device). kk_ws_free of a view releases the
 * arena back to where the view began. */
typedef struct kk_ws {
    choir_arena *arena;
    choir_stream *s; /* the call's host stream (views of a call only), or NULL */
    size_t base;     /* views: the arena's fill level when the view was made */
    bool owned;
} kk_ws;
kk_ws *kk_ws_create(int64_t capacity_bytes, choir_err *err);
void kk_ws_free(kk_ws *ws);
/* *view = the call's memory from here on (nothing allocated). */
void kk_ws_over(kk_ws *view, const kk_ws *call);
/* n floats, uninitialised; NULL when the workspace is exhausted. */
float *kk_ws_floats(kk_ws *ws, int64_t n);
size_t kk_ws_mark(const kk_ws *ws);
void kk_ws_release(kk_ws *ws, size_t mark);
size_t kk_ws_high_water(const kk_ws *ws);
/* A stream on the CPU backend `be` whose working memory (and `scratch_bytes`
 * of kernel scratch) comes from ws; free it before releasing ws past its
 * allocations. NULL (and err) when ws has no room. */
choir_stream *kk_ws_stream(kk_ws *ws, choir_backend *be, size_t scratch_bytes, choir_err *err);

/* The memory of one call given a batch arena (choir_kokoro_params.arena):
 * kk_call_open makes *call a view of `arena` with, on a model without a
 * device, one host stream over it (kokoro_exec.c) that every network stage
 * of the call runs on; each stage carves its kernel scratch from the arena
 * for its own length and gives it back (kk_host_scratch_bytes), so nothing
 * in the forward allocates. arena NULL: *call is zeroed (the counted
 * allocator, call by call) and 0 returned. kk_call_close frees the stream
 * and releases the arena to where the call began. */
int kk_call_open(const choir_kokoro *m, choir_arena *arena, kk_ws *call, choir_err *err);
void kk_call_close(kk_ws *call);
/* Kernel scratch one host stage takes at most, for `ids` ids or `frames`
 * frames (the stage's longest; 0 when it has none): the widest im2col block
 * of Kokoro's convolutions, an LSTM's gates over the longer of the two,
 * ALBERT's attention scores and its linears in bf16 or quantized storage,
 * with the pool's thread count. */
size_t kk_host_scratch_bytes(int64_t ids, int64_t frames);

/* --- blocks (kokoro_blocks.c); all return 0 or CHOIR_ENOMEM ------------- */

/* y[cout, Tout] = conv1d(x[cin, T]) with the layer's weight (groups 1). */
void kk_conv1d(const kk_conv *c, const float *x, int64_t T, int stride, int pad, int dil,
               float *y);
/* y[T, 2H] = [forward ; reverse] LSTM over x[T, In]. */
int kk_bilstm(const kk_lstm *l, const float *x, int64_t T, float *y, kk_ws *ws);
/* AdaLayerNorm in place on x[T, C]: per time step over C, no affine. */
int kk_ada_layer_norm(const kk_adain *a, float *x, int64_t T, const float *style, kk_ws *ws);
/* gb [2C] = the norm's affine of style as a plain LayerNorm takes it: 1 +
 * gamma, then beta (kk_ada_layer_norm's (1 + gamma) * norm + beta). */
void kk_ada_layer_norm_affine(const kk_adain *a, const float *style, float *gb);
/* y[C, T] = x[T, C]^T */
void kk_transpose(const float *x, int64_t rows, int64_t cols, float *y);

/* --- decoder (kokoro_decoder.c) and generator noise (kokoro_generator.c) --- */

/* The decoder alone on the CPU (kokoro_decoder.c, the backend forward with
 * a CPU backend): asr[512, L], f0 / n [2L], s_dec[128] -> audio[600 L];
 * noise NULL (zero) or [600 L, 9] Gaussian draws. Takes its own working
 * memory. */
int kk_decoder(const choir_kokoro *m, const float *asr, int64_t L, const float *f0,
               const float *n, const float *s_dec, const float *noise, float *audio,
               choir_err *err);

/* Fills n standard normal floats from a seeded generator (deterministic). */
void kk_gaussian_fill(float *x, int64_t n, uint64_t seed);

/* --- loader internals (kokoro_load.c) ----------------------------------- */
int kk_load_vocab(choir_kokoro *m, const char *config_path, choir_err *err);

/* --- the GPU seam (kokoro_forward.c, kokoro_generator.c, kokoro_cuda.c) --- */

/* One piece's decoder inputs, as the text and prosody side makes them (the
 * noise as its seed: the decoder draws it where it makes the source). The
 * arrays are choir_alloc'd (CHOIR_MEM_ACTIVATIONS), or carved from the
 * call's batch arena (in_arena: given back when the caller releases it);
 * kk_piece_free frees the former. */
typedef struct kk_piece {
    int64_t L;          /* frames */
    float *asr;         /* [512, L] */
    float *f0, *n;      /* [2L] (F0 in Hz) */
    bool seeded;        /* SineGen's draws: the seeded stream of `seed`; false: zero */
    uint64_t seed;
    bool in_arena;
} kk_piece;
void kk_piece_free(kk_piece *pc);

/* Everything before the decoder: ids -> durations -> asr, F0, N (and the
 * seeded noise), tracing every stage up to "asr" as the full pass does.
 * Arguments as choir_kokoro_synthesize_ids, which is kk_front + kk_net_decode
 * (kk_front_batch for one piece). */
int kk_front(const choir_kokoro *m, const int32_t *ids, int n_ids, const float *style,
             const choir_kokoro_params *p, kk_piece *out, choir_err *err);

/* One piece, front and decoder, in the call's memory (NULL: the counted
 * allocator): choir_kokoro_synthesize_ids once its arguments are checked.
 * The audio is the caller's (choir_alloc'd); everything else is carved from
 * call's arena and given back before returning. */
int kk_synthesize_in(const choir_kokoro *m, const kk_ws *call, const int32_t *ids, int n_ids,
                     const float *style, const choir_kokoro_params *p, float **audio_out,
                     int64_t *n_samples, choir_err *err);

/* The generator's harmonic source and its STFT, on the CPU: f0[2L] ->
 * S[22, ld] (magnitudes, then phases, frames 0..120 L; ld >= 120 L + 1);
 * the draws are noise [600 L, 9] when non-NULL, else the seeded stream of
 * *seed (kk_gaussian_fill), else zero. work holds 618 L floats. */
void kk_source_spectrum_buf(const choir_kokoro *m, const float *f0, int64_t L, const float *noise,
                            const uint64_t *seed, float *S, int64_t ld, float *work);
/* The model's harmonic source as choir/kernels.h's parameters. */
void kk_nsf_params(const choir_kokoro *m, choir_nsf_source *p);

/* --- the executor (kokoro_exec.c) ---------------------------------------- */

/* Sees each piece's intermediate tensors in a decode (host copies [C, T] at
 * the piece's own length, valid during the call): "decoder_out" [512, 2L],
 * "stage0" [256, 20L], "post" [22, 120L + 1]. */
typedef void (*kk_dec_trace_fn)(void *user, int piece, const char *stage, const float *x,
                                int64_t C, int64_t T);

/* The network's forward objects on one backend (owned when owns_be), one
 * stream, counters. On a device every weight is uploaded here. NULL (and
 * err) on failure; the model and the backend must outlive it. */
typedef struct kk_exec kk_exec;
kk_exec *kk_exec_create(const choir_kokoro *m, choir_backend *be, bool owns_be, choir_err *err);
void kk_exec_free(kk_exec *x);
int64_t kk_exec_weight_bytes(const kk_exec *x);
int64_t kk_exec_dec_weight_bytes(const kk_exec *x);
choir_backend *kk_exec_backend(const kk_exec *x);
void kk_exec_get_stats(kk_exec *x, choir_kokoro_gpu_stats *out);
void kk_exec_reset_stats(kk_exec *x);
/* The network's stages for n pieces on one executor, each under the
 * backend's lock (host pointers in and out): ALBERT from the normalised
 * embeddings emb[b] [T[b], 128] -> bert[b] [T[b], 768], d_en[b] [T[b], 512];
 * y[b] [T[b], 2H] = the BiLSTM l over in[b] [T[b], In] (CHOIR_EINVAL when
 * the model has no weights for l); the text encoder from the ids ids[b]
 * [T[b]] -> y[b] [T[b], 512] (embedding, convolutions and its BiLSTM); the
 * F0 / N blocks from the shared LSTM's
 * output in[b] [512, L[b]] -> f0[b], n_out[b] [2 L[b]]; the decoder:
 * audio[i] (choir_alloc'd, 600 frames floats, NULL on failure) for in[i],
 * trace may be NULL. */
int kk_exec_albert(kk_exec *x, int n, const float *const *emb, const int64_t *T,
                   float *const *bert, float *const *d_en, choir_err *err);
int kk_exec_bilstm(kk_exec *x, const kk_lstm *l, int n, const float *const *in, const int64_t *T,
                   float *const *y, choir_err *err);
int kk_exec_text(kk_exec *x, int n, const int32_t *const *ids, const int64_t *T,
                 float *const *y, choir_err *err);
int kk_exec_f0n(kk_exec *x, int n, const float *const *in, const int64_t *L,
                const float *const *s_pro, float *const *f0, float *const *n_out, choir_err *err);
int kk_exec_decode(kk_exec *x, const choir_kokoro_decode_input *in, int n, float **audio,
                   kk_dec_trace_fn trace, void *user, choir_err *err);
/* The shared BiLSTM over en[b] [L[b], 640] (host) and then the F0 / N
 * blocks in one device call, the LSTM's output transposed on the device and
 * never brought to the host: f0[b], n_out[b] [2 L[b]] as kk_exec_bilstm, a
 * transpose and kk_exec_f0n give them (a transpose is exact, so the same
 * values). Counted as one LSTM and one F0 / N call. CHOIR_EINVAL on the host
 * executor. */
int kk_exec_shared_f0n(kk_exec *x, int n, const float *const *en, const int64_t *L,
                       const float *const *s_pro, float *const *f0, float *const *n_out,
                       choir_err *err);
/* kk_exec_shared_f0n with the LSTM's input gathered on the device: d[b]
 * [T[b], 640] the duration encoder's output rows, dur[b] [T[b]] their frames
 * (summing to L[b]); the same input as en[b] = the rows repeated, so the same
 * curves. dur NULL: en = d as kk_exec_shared_f0n. */
int kk_exec_shared_f0n_rows(kk_exec *x, int n, const float *const *d, const int64_t *T,
                            const int32_t *const *dur, const int64_t *L,
                            const float *const *s_pro, float *const *f0, float *const *n_out,
                            choir_err *err);
/* The duration encoder and the duration LSTM in one device call
 * (kk_fnet_duration: d[b] [T[b], 640] [d_en ; s_pro] in, the encoder's
 * output out; y[b] [T[b], 512] the duration LSTM's output; norm_gb[b]
 * [3, 1024] the norms' (1 + gamma, beta)). Counted as one LSTM call.
 * CHOIR_EINVAL on the host executor. */
int kk_exec_duration(kk_exec *x, int n, float *const *d, const int64_t *T,
                     const float *const *norm_gb, float *const *y, choir_err *err);
/* The same in the call's memory (kk_net_*'s `call`; NULL: as above). On the
 * host executor a call without that memory runs on a stream of its own, so
 * any number of threads may call it at once; a device serves one at a time. */
int kk_exec_albert_in(kk_exec *x, const kk_ws *call, int n, const float *const *emb,
                      const int64_t *T, float *const *bert, float *const *d_en, choir_err *err);
int kk_exec_bilstm_in(kk_exec *x, const kk_ws *call, const kk_lstm *l, int n,
                      const float *const *in, const int64_t *T, float *const *y, choir_err *err);
int kk_exec_text_in(kk_exec *x, const kk_ws *call, int n, const int32_t *const *ids,
                    const int64_t *T, float *const *y, choir_err *err);
int kk_exec_f0n_in(kk_exec *x, const kk_ws *call, int n, const float *const *in,
                   const int64_t *L, const float *const *s_pro, float *const *f0,
                   float *const *n_out, choir_err *err);
int kk_exec_decode_in(kk_exec *x, const kk_ws *call, const choir_kokoro_decode_input *in, int n,
                      float **audio, kk_dec_trace_fn trace, void *user, choir_err *err);

#ifdef CHOIR_HAVE_CUDA
/* The executor of a GPU attachment (kokoro_cuda.c), for the GPU check. */
kk_exec *kk_gpu_exec(struct choir_kokoro_gpu *g);
#endif

/* The same on m's executor: the attached one, else the model's host
 * executor. What the network code calls. `call`: the call's memory (a view
 * with a host stream: the stage runs on that stream, in the call's arena),
 * or NULL / a workspace without one (on the host a stream of the stage's
 * own, its memory reserved from the counted allocator). kk_net_batches:
 * whether that executor runs n pieces as one batch (a device), so a batch
 * of requests should be one call rather than one call per request. */
bool kk_net_batches(const choir_kokoro *m);
int kk_net_albert(const choir_kokoro *m, const kk_ws *call, int n, const float *const *emb, const int64_t *T,
                  float *const *bert, float *const *d_en, choir_err *err);
int kk_net_bilstm(const choir_kokoro *m, const kk_ws *call, const kk_lstm *l, int n, const float *const *in,
                  const int64_t *T, float *const *y, choir_err *err);
int kk_net_text(const choir_kokoro *m, const kk_ws *call, int n, const int32_t *const *ids, const int64_t *T,
                float *const *y, choir_err *err);
int kk_net_f0n(const choir_kokoro *m, const kk_ws *call, int n, const float *const *in, const int64_t *L,
               const float *const *s_pro, float *const *f0, float *const *n_out, choir_err *err);
int kk_net_decode(const choir_kokoro *m, const kk_ws *call, const choir_kokoro_decode_input *in, int n, float **audio,
                  choir_err *err);
/* A device path's switch (CHOIR_KOKORO_DEVICE_SOURCE, _STYLE_PRODUCT,
 * _SHARED_F0N, _TOUCH_AUDIO): on unless the variable is "0". */
static inline bool kk_switch_on(const char *name) {
    const char *v = getenv(name);
    return !(v && strcmp(v, "0") == 0);
}

/* kk_net_keeps_frames: m's executor is a device and CHOIR_KOKORO_SHARED_F0N is
 * not 0 (on by default since it passed the GPU check, H100 6 Dec 2026), so the front runs the shared
 * LSTM and the F0 / N blocks as kk_net_shared_f0n (kk_exec_shared_f0n on
 * m's executor) instead of kk_net_bilstm, a host transpose and kk_net_f0n. */
bool kk_net_keeps_frames(const choir_kokoro *m);
int kk_net_shared_f0n(const choir_kokoro *m, int n, const float *const *en, const int64_t *L,
                      const float *const *s_pro, float *const *f0, float *const *n_out,
                      choir_err *err);

/* kk_net_front_on_device: m's executor is a device and
 * CHOIR_KOKORO_FRONT_DEVICE is not "0" (on since it ran on an H100, 7 Dec 2026),
 * so the batched front keeps more of its tensors on the device: the duration
 * encoder's three layers and the duration LSTM as one kk_net_duration call
 * (no host AdaLayerNorm, one upload and two downloads instead of eight
 * transfers), ALBERT's bert output not brought down unless traced, and the
 * shared LSTM's input gathered on the device from the duration encoder's rows
 * (kk_net_shared_f0n_rows: [T, 640] up instead of [L, 640], no host copy). */
bool kk_net_front_on_device(const choir_kokoro *m);
int kk_net_duration(const choir_kokoro *m, int n, float *const *d, const int64_t *T,
                    const float *const *norm_gb, float *const *y, choir_err *err);
int kk_net_shared_f0n_rows(const choir_kokoro *m, int n, const float *const *d, const int64_t *T,
                           const int32_t *const *dur, const int64_t *L, const float *const *s_pro,
                           float *const *f0, float *const *n_out, choir_err *err);

/* --- single-piece stages (kokoro_forward.c) -------------------------------- */

/* ALBERT and bert_encoder: ids[T] (valid ids) -> bert[T, 768],
 * d_en[T, 512], on m's executor. Workspace: the embeddings, 130 T floats. */
int kk_albert(const choir_kokoro *m, const int32_t *ids, int64_t T, float *bert, float *d_en,
              kk_ws *ws);

/* F0 and N curves from the aligned features (the prosody predictor's shared
 * LSTM, then the F0 / N residual blocks and projections) on m's executor:
 * en[L, 640], s_pro[128] -> f0[2L] (Hz), n[2L]. Workspace: 2 x 512 L
 * floats. t_lstm receives the LSTM's seconds (may be NULL). */
int kk_f0_n(const choir_kokoro *m, const float *en, int64_t L, const float *s_pro, float *f0,
            float *n, double *t_lstm, kk_ws *ws);

/* The pieces of kk_front that the batched front (kokoro_front_batch.c)
 * calls between its device batches, the same code the single-piece front
 * runs (kokoro_forward.c). */
/* ALBERT's embeddings: ids[T] -> e[T, 128] (word + type 0 + position, then
 * LayerNorm); type0 and row: scratch of 128 floats each. */
void kk_albert_embed(const choir_kokoro *m, const int32_t *ids, int64_t T, float *e, float *type0,
                     float *row);
/* x[T, 640] = [y[t] (512) ; style (128)] per time step */
void kk_concat_style(const float *y, int64_t T, const float *style, float *x);
/* Durations from the duration LSTM's output h[T, 512]: dur[T] (frames, real)
 * and pred_dur[T] (>= 1). Workspace: 50 T floats. */
int kk_durations_from(const choir_kokoro *m, const float *h, int64_t T, float speed, float *dur,
                      int32_t *pred_dur, kk_ws *ws);

/* The front for n pieces at once, stage by stage (kokoro_front_batch.c):
 * each network stage (ALBERT, each of the six BiLSTMs, the F0 / N blocks)
 * is one kk_net call for all pieces, the host steps between them (the
 * embeddings, the AdaLayerNorms, the durations, the text encoder's
 * convolutions, the alignment, the noise) per piece on the default pool.
 * On the CPU piece b is bit for bit what it is alone (n = 1); on a device
 * within float summation order. Piece b gets ids[b] (n_ids[b]), style[b] and
 * params[b] (its trace too: every front stage of that piece, as kk_front
 * documents) and fills out[b]; on failure every out[b] is freed and err
 * names the first failing piece (when n > 1). kk_front is this for one. */
int kk_front_batch(const choir_kokoro *m, int n, const int32_t *const *ids, const int *n_ids,
                   const float *const *style, const choir_kokoro_params *params, kk_piece *out,
                   choir_err *err);
/* kk_front_batch in the call's memory (NULL: the counted allocator): each
 * piece's workspaces and its kk_piece arrays are carved from call's arena
 * (in that order, so the frame side is given back before the decoder; the
 * text side and the piece stay until the caller releases the arena), the
 * network stages run on its stream, and the host steps run piece after
 * piece (one arena has one user at a time). */
int kk_front_batch_in(const choir_kokoro *m, const kk_ws *call, int n, const int32_t *const *ids,
                      const int *n_ids, const float *const *style,
                      const choir_kokoro_params *params, kk_piece *out, choir_err *err);

#endif
