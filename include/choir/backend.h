/* choir/backend.h: the operations model forwards are written in, one
 * implementation per backend (the CPU over choir/kernels.h; CUDA over
 * choir/cuda.h in CUDA builds).
 *
 * Three objects:
 *  - choir_backend: a device (the CPU, or one CUDA device with its context).
 *    A model loads its weights onto one backend (choir_backend_weight,
 *    choir_backend_vec) and keeps them there for its life.
 *  - choir_stream: one worker's way of running operations on a backend: the
 *    order they run in (CUDA: the context's stream; CPU: they run when
 *    called), the working memory of a batch (a choir_arena in the backend's
 *    memory), the kernel scratch, and the first error. Not thread-safe: one
 *    thread uses a stream at a time; several streams may share a CPU backend
 *    (engine workers running batches of one model at once). A CUDA backend
 *    serialises its users itself: take choir_backend_lock around a batch.
 *  - the operations, choir_op_*(stream, ...): each enqueues work on the
 *    stream and returns at once (CUDA), or runs it (CPU). Results are visible
 *    to the host after choir_op_download or choir_stream_sync.
 *
 * Pointers. Every tensor argument is backend memory: host memory on the CPU,
 * device memory on CUDA (from the stream's arena, choir_stream_alloc, or the
 * weights). Activations are row-major float32 with the shapes and semantics
 * of the CPU kernels (choir/kernels.h), which are the test oracle. Integer
 * arrays (slots, positions, lengths, ids) are int32 in backend memory, so a
 * captured CUDA graph reads the values current at each replay.
 *
 * Errors are sticky. The first failing operation records its code and
 * message on the stream; every later operation returns that code at once
 * and does nothing, until choir_stream_clear. So a forward pass is written
 * as a plain sequence of calls and checked once with choir_stream_status.
 * An operation a backend lacks fails with CHOIR_EUNSUPPORTED and names the
 * operation and the backend. Bad shapes are CHOIR_EINVAL.
 *
 * Memory. Nothing here allocates inside a forward pass once a batch is
 * planned: working memory comes from the stream's arena (choir_stream_alloc:
 * on the CPU the engine's batch arena when given, on CUDA a device block the
 * stream reserved), kernel scratch from the stream's scratch block
 * (choir_stream_reserve). A kernel that needs more scratch than was reserved
 * still runs, with counted memory of its own, and the shortfall is recorded
 * (choir_stream_stats: scratch_misses, scratch_need) so plans can be fixed.
 *
 * Adding an operation: declare it in a header of its own area (this one for
 * shared ops, or include/choir/backend_<area>.h) and put it in one file
 * src/tensor/backend/op_<name>.c that checks the stream (choir_stream_ok in
 * src/tensor/backend/backend_internal.h), runs the CPU version when the
 * backend is the host and the CUDA version (or CHOIR_EUNSUPPORTED) when it
 * is not; tests/test_backend.c shows how each op is checked against its
 * kernels.h reference. */
#ifndef CHOIR_BACKEND_H
#define CHOIR_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/arena.h"
#include "choir/error.h"
#include "choir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- backends ------------------------------------------------------------ */

typedef struct choir_backend choir_backend;

typedef enum choir_backend_kind {
    CHOIR_BACKEND_CPU = 0,
    CHOIR_BACKEND_CUDA = 1
} choir_backend_kind;

/* The CPU: backend memory is host memory, weights are used where they lie
 * (a mapped checkpoint). NULL (and err) only when out of memory. */
choir_backend *choir_backend_cpu(choir_err *err);

typedef struct choir_backend_cuda_opts {
    int device;  /* CUDA device index, 0-based */
    bool bf16;   /* choir_backend_weight stores f32 matrices as bf16 */
    bool tf32;   /* f32 products on TF32 tensor cores (choir_cuda_set_tf32) */
} choir_backend_cuda_opts;

/* A CUDA device (its own choir_cuda context). CHOIR_EUNSUPPORTED in builds
 * without CUDA, CHOIR_ENOTFOUND when there is no such device. o NULL:
 * device 0, f32 as stored, no TF32. */
choir_backend *choir_backend_cuda(const choir_backend_cuda_opts *o, choir_err *err);

/* A CUDA backend over a context the caller already has (a model's GPU
 * object that other code shares): the context is not owned and must outlive
 * the backend. bf16 as in choir_backend_cuda_opts. CHOIR_EUNSUPPORTED in
 * builds without CUDA. */
struct choir_cuda;
choir_backend *choir_backend_cuda_over(struct choir_cuda *cu, bool bf16, choir_err *err);

/* GPUs a CUDA backend can be opened on, for placement (the engine's
 * devices). */
typedef struct choir_backend_device {
    char name[256];      /* the card's name ("NVIDIA H200") */
    int64_t total_bytes; /* its memory, bytes */
} choir_backend_device;

/* The number of CUDA devices visible (0 when there is no driver or no
 * device: never an error), or CHOIR_EUNSUPPORTED in a build without CUDA. */
int choir_backend_device_count(void);
/* Fills *out for CUDA device `index` (0-based) without opening a context on
 * it. Returns 0, CHOIR_ENOTFOUND (no such device), CHOIR_EUNSUPPORTED (a
 * build without CUDA) or CHOIR_EINTERNAL, with err. */
int choir_backend_device_query(int index, choir_backend_device *out, choir_err *err);

/* Frees the backend (and its CUDA context unless it came from
 * choir_backend_cuda_over). Every stream and every weight on it must be
 * freed first. NULL is a no-op. */
void choir_backend_free(choir_backend *be);

choir_backend_kind choir_backend_get_kind(const choir_backend *be);
/* True when backend memory is host memory (the CPU backend). */
bool choir_backend_is_host(const choir_backend *be);
/* "cpu" or "cuda:N". */
const char *choir_backend_name(const choir_backend *be);
/* The CUDA context (struct choir_cuda, choir/cuda.h) of a CUDA backend, for
 * timing and statistics; NULL for the CPU. Owned by the backend. */
struct choir_cuda *choir_backend_cuda_context(const choir_backend *be);
/* Whether streams of this backend can capture graphs (CUDA: yes). */
bool choir_backend_has_graphs(const choir_backend *be);

/* Device bytes held through the backend now / at most (0 on the CPU, whose
 * memory is counted by choir/alloc.h). */
int64_t choir_backend_mem_current(const choir_backend *be);
int64_t choir_backend_mem_peak(const choir_backend *be);
void choir_backend_mem_reset_peak(choir_backend *be);

/* One user at a time for a CUDA backend (engine workers sharing a GPU
 * replica); no-ops on the CPU, whose streams are independent. */
void choir_backend_lock(choir_backend *be);
void choir_backend_unlock(choir_backend *be);

/* --- weights on a backend ---------------------------------------------- */
/* A model keeps each linear layer as a choir_weight whose pointers are
 * backend memory: on the CPU the host weight itself (nothing copied), on
 * CUDA a device copy in the same storage (f32 matrices as bf16 when the
 * backend was opened with bf16). Vectors (biases, norms, convolution
 * kernels, tables) likewise. Each call adds what it uploads to the store's
 * total; choir_backend_weights_free frees all of it. */

typedef struct choir_backend_weights choir_backend_weights;

/* An empty store on `be`. NULL (and err) when out of memory. */
choir_backend_weights *choir_backend_weights_create(choir_backend *be, choir_err *err);
/* Frees everything uploaded through the store. NULL is a no-op. */
void choir_backend_weights_free(choir_backend_weights *ws);
/* `host` on the backend, into *out. Returns 0 or the error (also kept, see
 * choir_backend_weights_status). */
int choir_backend_weight(choir_backend_weights *ws, const choir_weight *host, choir_weight *out);
/* As choir_backend_weight but keeps the host storage even when the backend
 * converts f32 to bf16 (for matrices whose precision matters). */
int choir_backend_weight_exact(choir_backend_weights *ws, const choir_weight *host,
                               choir_weight *out);
/* As choir_backend_weight for each of host[0 .. n) into *out[i], on CUDA
 * in one device buffer, each weight's rows right after the one before
 * (the backend then runs products of several of them as one: choir_op_
 * norm_qkv_rope, choir_op_gated_mlp) when all are bf16 on the device, of
 * the same columns, each a multiple of 256 bytes; separately otherwise.
 * host[i] and out[i] may be the same weight. */
int choir_backend_weight_group(choir_backend_weights *ws, int n, const choir_weight *const *host,
                               choir_weight *const *out);
/* n floats of host data on the backend; NULL host gives NULL (an absent
 * bias). On failure NULL, and the store keeps the error. */
const float *choir_backend_vec(choir_backend_weights *ws, const float *host, int64_t n);
/* The first error of the store's calls (0 when none; err filled). */
int choir_backend_weights_status(const choir_backend_weights *ws, choir_err *err);
/* Backend bytes the store holds (0 on the CPU: the host weights are not
 * copied). */
int64_t choir_backend_weights_bytes(const choir_backend_weights *ws);

/* --- streams --------------------------------------------------------------- */

typedef struct choir_stream choir_stream;

/* A stream on `be` with no working memory yet. NULL (and err) when out of
 * memory. */
choir_stream *choir_stream_create(choir_backend *be, choir_err *err);
/* Frees the stream and its reserved blocks (not an arena given with
 * choir_stream_use_arena). NULL is a no-op. */
void choir_stream_free(choir_stream *s);
choir_backend *choir_stream_backend(const choir_stream *s);

/* Working memory and kernel scratch, planned before a forward pass:
 * reserves `work_bytes` of backend memory for choir_stream_alloc (unless an
 * arena was given) and `scratch_bytes` for kernels, growing the stream's
 * blocks when they are smaller (what was allocated from them is lost then;
 * call it before carving). Returns 0, CHOIR_ENOMEM / CHOIR_EBUSY (device
 * budget), or CHOIR_EBUSY while a graph of the stream is alive. */
int choir_stream_reserve(choir_stream *s, size_t work_bytes, size_t scratch_bytes,
                         choir_err *err);
/* CPU only: carve working memory (and the scratch, when `scratch_bytes` > 0)
 * from the host arena `a` from now on (the engine's batch arena), instead of
 * the stream's own block; NULL goes back to the own block. The arena must
 * outlive its use. CHOIR_EUNSUPPORTED on a device backend. */
int choir_stream_use_arena(choir_stream *s, choir_arena *a, size_t scratch_bytes,
                           choir_err *err);
/* `bytes` of backend memory aligned to 256 bytes (uninitialised), valid until
 * released past it or the stream's memory is reset or re-reserved. NULL when
 * the working memory has no room: that is recorded as the stream's error
 * (CHOIR_ENOMEM naming `what`, which may be NULL). */
void *choir_stream_alloc(choir_stream *s, size_t bytes, const char *what);
static inline float *choir_stream_floats(choir_stream *s, int64_t n, const char *what) {
    return (float *)choir_stream_alloc(s, (size_t)(n > 0 ? n : 0) * sizeof(float), what);
}
/* Scoped working memory: release frees everything allocated after the mark. */
size_t choir_stream_mark(const choir_stream *s);
void choir_stream_release(choir_stream *s, size_t mark);
/* Bytes of working memory in use now / at most since the last reset_peak. */
size_t choir_stream_used(const choir_stream *s);
size_t choir_stream_high_water(const choir_stream *s);
void choir_stream_reset_peak(choir_stream *s);

/* Waits for everything enqueued (CUDA); reports asynchronous faults. Also
 * returns the sticky error. */
int choir_stream_sync(choir_stream *s, choir_err *err);
/* The first error since the last clear (0 when none); copies it to err. */
int choir_stream_status(const choir_stream *s, choir_err *err);
/* Forgets the sticky error (after the caller handled it). */
void choir_stream_clear(choir_stream *s);
/* Records an error of the caller's own on the stream (the first one wins);
 * returns `code`. */
int choir_stream_fail(choir_stream *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct choir_stream_stats {
    int64_t ops;            /* operations run or enqueued */
    int64_t scratch_bytes;  /* kernel scratch reserved */
    int64_t scratch_need;   /* the most kernel scratch one call wanted */
    int64_t scratch_misses; /* calls that wanted more than was reserved */
} choir_stream_stats;
void choir_stream_get_stats(const choir_stream *s, choir_stream_stats *st);

/* --- graphs (CUDA) ---------------------------------------------------------- */
/* Between begin and end, operations are recorded instead of run; launch
 * replays them with the pointers they were recorded with, reading the
 * backend-memory values (slots, lengths, inputs) current at the replay.
 * While recording: no allocation, no upload or download, no sync. A graph
 * holds the stream's memory addresses: free graphs before re-reserving or
 * freeing the stream. CPU streams cannot record (begin returns
 * CHOIR_EUNSUPPORTED without making it the stream's error): run the
 * operations directly. */
typedef struct choir_graph choir_graph;
int choir_stream_graph_begin(choir_stream *s, choir_err *err);
/* Ends recording; NULL (and err) when an operation in between failed or
 * could not be recorded (the sticky error is cleared again: the caller
 * falls back to running the operations). */
choir_graph *choir_stream_graph_end(choir_stream *s, choir_err *err);
int choir_stream_graph_launch(choir_stream *s, choir_graph *g);
/* NULL is a no-op. */
void choir_graph_free(choir_graph *g);

/* --- host memory for transfers ---------------------------------------------- */
/* Host memory that a backend copies to and from quickly and asynchronously:
 * page-locked on CUDA (counted apart, choir_cuda_host_mem_current), counted
 * choir_alloc memory on the CPU. NULL when refused (not an error: use
 * ordinary memory then). Free on the same backend. */
void *choir_backend_host_alloc(choir_backend *be, size_t bytes);
void choir_backend_host_free(choir_backend *be, void *p);

/* --- transfers and copies ------------------------------------------------- */
/* Host -> backend; the host memory may be reused on return. */
int choir_op_upload(choir_stream *s, void *dst, const void *src, size_t bytes);
/* Backend -> host; waits for the stream, so the data is there on return. */
int choir_op_download(choir_stream *s, void *dst, const void *src, size_t bytes);
/* Asynchronous forms: the host memory must stay untouched (upload) or
 * unread (download) until choir_stream_sync (or a synchronous transfer).
 * Fast with choir_backend_host_alloc memory. On the CPU they run now. */
int choir_op_upload_async(choir_stream *s, void *dst, const void *src, size_t bytes);
int choir_op_download_async(choir_stream *s, void *dst, const void *src, size_t bytes);
/* Backend -> backend, non-overlapping. */
int choir_op_copy(choir_stream *s, void *dst, const void *src, size_t bytes);
/* rows x cols floats from src (row stride lds) to dst (row stride ldd). */
int choir_op_copy_rows(choir_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds,
                       int64_t rows, int64_t cols);
/* Sets bytes to zero. */
int choir_op_zero(choir_stream *s, void *dst, size_t bytes);
/* n floats of src into dst stored as dst_dtype: CHOIR_DTYPE_F32 (a copy),
 * CHOIR_DTYPE_BF16 (rounded to nearest even, as choir_f32_to_bf16_n) or, on
 * the CPU, CHOIR_DTYPE_F16 (as choir_f32_to_f16_n). */
int choir_op_convert(choir_stream *s, const float *src, void *dst, choir_dtype dst_dtype,
                     int64_t n);

/* --- matrix products ----------------------------------------------------- */
/* y[M, W.rows] = x[M, W.cols] W^T (+ bias[W.rows]); W in any storage on
 * this backend (choir_backend_weight); y must not alias x. */
int choir_op_linear(choir_stream *s, const float *x, int64_t M, const choir_weight *W,
                    const float *bias, float *y);
/* n (<= 8) of them over the same x: y[i] = x W[i]^T (+ bias[i]), each as
 * choir_op_linear gives it. The CPU runs a decoder step's few rows of them
 * as one pool job (choir_linear_n); elsewhere they are n operations. */
int choir_op_linear_n(choir_stream *s, const float *x, int64_t M, int n,
                      const choir_weight *const *W, const float *const *bias, float *const *y);
/* Flags of choir_op_linear_bf16. */
#define CHOIR_LINEAR_GELU 1u       /* y = GELU_erf(x W^T + bias) */
#define CHOIR_LINEAR_ACCUMULATE 2u /* y += x W^T + bias (y f32) */
/* A linear layer over bf16 rows (uint16 storage; activations kept in bf16
 * between operations): y[M, W.rows] = x[M, W.cols] W^T + bias, then GELU
 * with CHOIR_LINEAR_GELU; y is y_dtype (CHOIR_DTYPE_BF16, rounded, or
 * CHOIR_DTYPE_F32), CHOIR_LINEAR_ACCUMULATE adds into an f32 y instead of
 * writing it (not with GELU). The CPU widens x, runs choir_linear and
 * rounds (the oracle); CUDA needs bf16 weights (CHOIR_EUNSUPPORTED
 * otherwise) and rounds the product to bf16 before bias and GELU (bf16 y,
 * whose W.rows must be a multiple of 8). */
int choir_op_linear_bf16(choir_stream *s, const uint16_t *x, int64_t M, const choir_weight *W,
                         const float *bias, void *y, choir_dtype y_dtype, unsigned flags);
/* choir_op_linear with one step after it (flags as choir_op_linear_bf16's):
 * CHOIR_LINEAR_GELU applies GELU_erf to y, CHOIR_LINEAR_ACCUMULATE adds the
 * product into y (y += x W^T + bias: a residual stream) instead of writing
 * it. The results are those of the two operations in turn: where the
 * backend does not fuse the step (the CPU, and CUDA outside its GEMV path of
 * a few rows), ACCUMULATE writes the product to tmp [M, W.rows] and adds it,
 * GELU runs choir_op_act on y; on CUDA's cuBLAS path over bf16 weights with
 * choir_cuda_fused_rows on, ACCUMULATE without a bias adds through cuBLAS's
 * C operand instead (the same one rounding of y + the product, unless
 * cuBLAS sums in another order for it). tmp may be NULL without
 * ACCUMULATE. */
int choir_op_linear_ex(choir_stream *s, const float *x, int64_t M, const choir_weight *W,
                       const float *bias, float *y, unsigned flags, float *tmp);
/* A gated MLP's middle and its output projection: gate = SiLU(gate) up
 * over [M, W.cols] (choir_op_swiglu), then choir_op_linear_ex(gate, M, W,
 * bias, y, flags, tmp) (flags 0 or CHOIR_LINEAR_ACCUMULATE). gate's
 * contents are unspecified afterwards. Those two operations in turn (the
 * CPU; CUDA's GEMV path), except on CUDA's cuBLAS path over bf16 weights
 * with choir_cuda_fused_rows on, where the gated rows are written once as
 * the product's bf16 input and an accumulation is cuBLAS's (no bias then):
 * the same floats up to the order of cuBLAS's sum. One operation. */
int choir_op_swiglu_linear(choir_stream *s, float *gate, const float *up, int64_t M,
                           const choir_weight *W, const float *bias, float *y, unsigned flags,
                           float *tmp);
/* A pre-norm gated MLP added into the residual stream x [M, H]:
 * x += (SiLU(g) u) Wd^T with g, u = rms_norm(x; ln_g, eps) Wg^T, Wu^T
 * (Wg, Wu [I, H], Wd [H, I], no biases): choir_op_norm_linear (RMS, the two
 * layers into gate and up [M, I], h [M, H] its normalised rows) then
 * choir_op_swiglu_linear (CHOIR_LINEAR_ACCUMULATE through tmp [M, H]), and
 * literally those except on CUDA with choir_cuda_mlp_bf16 (and fused rows)
 * on at cuBLAS's row counts over bf16 weights, where gate and up are held
 * as bf16 rows in their buffers (rounded: within the bf16 bound of the f32
 * path). With choir_cuda_prefill_fused on too, and Wu's rows right after
 * Wg's in device memory (choir_backend_weight_group), gate and up are one
 * product into gate's buffer (bf16 [M, 2I]) and the SwiGLU's bf16 rows go to
 * up's (choir_cuda_gated_mlp_cat_rows: the floats of the bf16 gate/up path).
 * gate, up, h and tmp are unspecified afterwards. One operation. */
int choir_op_gated_mlp(choir_stream *s, float *x, int64_t M, const float *ln_g, float eps,
                       const choir_weight *Wg, const choir_weight *Wu, const choir_weight *Wd,
                       float *gate, float *up, float *h, float *tmp);
/* Where an operation's output rows also go (a KV cache), as
 * choir_op_rows_scatter writes them: row m to dst + slot[m] slot_stride +
 * pos[m] ld (elements of dtype; slot and pos int32 backend memory, slot
 * NULL: slot m). dst NULL: nowhere. */
typedef struct choir_rows_out {
    void *dst;
    choir_dtype dtype;
    int64_t slot_stride, ld;
    const int32_t *slot, *pos;
} choir_rows_out;

/* A layer norm feeding n linear layers of one input width K (a pre-norm
 * block: its q/k/v, its cross query, its MLP's first layer, the output
 * projection after the final norm). */
#define CHOIR_NORM_LINEAR_MAX 4
typedef struct choir_norm_linear {
    const float *ln_g, *ln_b; /* [K] (NULL: 1, 0) */
    float eps;
    bool rms;                 /* RMS norm (choir_op_rms_norm: ln_g only, ln_b NULL)
                                 instead of the layer norm */
    int n;                    /* 1..CHOIR_NORM_LINEAR_MAX */
    const choir_weight *W[CHOIR_NORM_LINEAR_MAX]; /* [rows_i, K] */
    const float *bias[CHOIR_NORM_LINEAR_MAX];     /* [rows_i] or NULL */
    float *y[CHOIR_NORM_LINEAR_MAX];              /* [M, rows_i] */
    choir_rows_out store[CHOIR_NORM_LINEAR_MAX];  /* y_i's rows also here (dst NULL: no) */
    unsigned flags;           /* 0 or CHOIR_LINEAR_GELU (every y_i) */
} choir_norm_linear;
/* h = layer_norm(x [M, K]) (rms_norm with p->rms), then y_i = h W_i^T + bias_i (GELU'd with
 * CHOIR_LINEAR_GELU), then y_i's rows written to store[i]: what
 * choir_op_layer_norm, choir_op_linear_n, choir_op_act and
 * choir_op_rows_scatter give in turn, and literally those on the CPU (and on
 * CUDA off its GEMV path, i.e. more than one row of 16-bit weights; with
 * choir_cuda_fused_rows on, an RMS norm over bf16 weights at cuBLAS's row
 * counts is written once as bf16 rows into h, which every product reads:
 * the same floats, since those products round their input so). On
 * CUDA's GEMV path it is one kernel (choir_cuda_norm_linear): each block
 * normalises x in shared memory and h is not written. h: [M, K] backend
 * memory for the normalised rows, its contents unspecified afterwards. One
 * operation. */
int choir_op_norm_linear(choir_stream *s, const float *x, int64_t M, const choir_norm_linear *p,
                         float *h);
/* A pre-norm attention's inputs: choir_op_norm_linear(x, M, p, h) over p's
 * three layers q, k, v (RMS, no stores, no GELU), then choir_op_rope over
 * q = p->y[0] (n_heads heads of head_dim) and k = p->y[1] (n_kv heads), all
 * of each head rotated (rotate-half) at positions pos; literally those
 * operations in turn, except on CUDA with choir_cuda_prefill_fused on, at
 * cuBLAS's row counts over bf16 weights lying one after another in device
 * memory (choir_backend_weight_group), where the three are one product and
 * the biases and rotations one pass after it (choir_cuda_qkv_rope_rows: the
 * same floats up to the order of cuBLAS's sums). Counted as the operations
 * it stands for. */
int choir_op_norm_qkv_rope(choir_stream *s, const float *x, int64_t M, const choir_norm_linear *p, float *h,
                           int n_heads, int n_kv, int64_t head_dim, const int32_t *pos, float theta);
/* C = alpha op(A) op(B) + beta C, row-major f32 (choir_gemm_f32). */
int choir_op_gemm(choir_stream *s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc);

/* --- attention --------------------------------------------------------------- */
/* The shape of a multi-head attention. Queries have n_head heads of Dh
 * values per row; keys and values n_kv_head heads (0: n_head), which must
 * divide n_head (grouped-query attention: query head h reads key head
 * h / (n_head / n_kv_head)). Keys and values are stored as `kv` says:
 * CHOIR_DTYPE_F32 (0, the default), CHOIR_DTYPE_BF16 (a KV cache in a
 * bf16 model's dtype: half the bytes; each value is widened to f32 where it
 * is read, so the result is that of f32 attention over the rounded cache)
 * or, on the CPU only, CHOIR_DTYPE_F16 (the same in half precision: what the
 * CPU keeps a Whisper window's cross-attention K/V in; a decoder step reads
 * it where it lies, choir_attention_f16); their strides count elements. */
typedef struct choir_attn {
    int n_head, n_kv_head;
    int64_t Dh;
    float scale;  /* usually 1 / sqrt(Dh) */
    bool causal;  /* query i sees keys <= i + (Tk - Tq) */
    choir_dtype kv;
} choir_attn;

/* One sequence, as choir_attention: q [Tq, n_head Dh] (row stride ldq),
 * k, v [Tk, n_kv_head Dh] (ldk, ldv), out [Tq, n_head Dh] (ldo); mask
 * additive [Tq, Tk] or NULL. A query whose keys are all masked gets zeros.
 * Score memory is kernel scratch: min(Tq, 128) Tk floats per CPU thread. */
int choir_op_attention(choir_stream *s, const float *q, int64_t ldq, const void *k, int64_t ldk,
                       const void *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                       int64_t Tk, const choir_attn *a, const float *mask);

/* B sequences against caches of a pool (batched decoder steps): sequence b's
 * queries start at q + b q_batch and its output at out + b out_batch; its
 * keys and values at k + kv_slot[b] slot_stride and v + kv_slot[b]
 * slot_stride (kv_slot NULL: slot b), of which kv_len[b] are valid (NULL:
 * Tk). causal uses each sequence's own length. kv_slot and kv_len are int32
 * backend memory read when the operation runs (a graph replay reads the
 * current values). No mask. */
int choir_op_attention_slots(choir_stream *s, int64_t B, const float *q, int64_t ldq,
                             int64_t q_batch, const void *k, int64_t ldk, const void *v,
                             int64_t ldv, int64_t slot_stride, const int32_t *kv_slot,
                             const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                             int64_t Tq, int64_t Tk, const choir_attn *a);

/* Self-attention over n pieces of different lengths stacked without padding
 * (Kokoro's ALBERT over a batch of pieces): piece b's rows are off[b] ..
 * off[b] + len[b] - 1 of q, k, v and out (each [R, n_head Dh], row stride
 * ld); each row attends to its own piece's rows only, as choir_op_attention
 * over that piece alone (no mask, not causal, f32 K/V, n_kv_head n_head or
 * 0). off, len: int32 backend memory [n]; Tm (host) at least every len[b].
 * The CPU runs choir_attention per piece; CUDA groups of pieces in five
 * launches each (choir_cuda_attention_ragged) instead of three a piece. */
int choir_op_attention_ragged(choir_stream *s, int64_t n, const float *q, const float *k,
                              const float *v, int64_t ld, const int32_t *off, const int32_t *len,
                              int64_t Tm, float *out, const choir_attn *a);

/* Fused attention over bf16 rows (uint16 storage; an encoder's windows): B
 * sequences, sequence b's queries at q + b q_batch, its keys and values at
 * k, v + b kv_batch, its output at out + b out_batch; shapes and strides
 * (elements) as choir_op_attention, a->kv not read. Scores, softmax and sums
 * in f32; out rounded to bf16. The CPU widens to f32, runs choir_attention
 * and rounds (the oracle); CUDA runs one fused tensor-core kernel that also
 * rounds the probabilities to bf16 before the product with V (relative
 * difference to the oracle near 2^-9, the rounding of bf16), for heads of
 * 16, 32 or 64 values with strides that are multiples of 8. No mask. */
int choir_op_attention_bf16(choir_stream *s, int64_t B, const uint16_t *q, int64_t ldq,
                            int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                            int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                            int64_t out_batch, int64_t Tq, int64_t Tk, const choir_attn *a);

/* Row b of src [B, cols] to dst + slot[b] slot_stride + pos[b] ld
 * (elements of dst_dtype: CHOIR_DTYPE_F32, CHOIR_DTYPE_BF16 rounded to
 * nearest even or, on the CPU, CHOIR_DTYPE_F16; slot and pos int32 backend
 * memory): appends each sequence's
 * new key or value row to its cache. slot NULL: slot b. */
int choir_op_rows_scatter(choir_stream *s, const float *src, int64_t B, int64_t cols, void *dst,
                          choir_dtype dst_dtype, int64_t slot_stride, int64_t ld,
                          const int32_t *slot, const int32_t *pos);

/* out[r, :] = row ids[r] of W (any storage, dequantized), r < n; ids int32
 * backend memory: embeddings. */
int choir_op_rows_gather(choir_stream *s, const choir_weight *W, const int32_t *ids, int64_t n,
                         float *out);

/* --- elementwise (in place where the name has no output) ------------------------ */
int choir_op_add(choir_stream *s, const float *a, const float *b, float *y, int64_t n);
int choir_op_mul(choir_stream *s, const float *a, const float *b, float *y, int64_t n);
/* gate = SiLU(gate) * up over n values (a gated MLP's middle): the floats of
 * choir_op_act(CHOIR_ACT_SILU) on gate, then choir_op_mul(gate, up), in one
 * operation (one kernel on CUDA). */
int choir_op_swiglu(choir_stream *s, float *gate, const float *up, int64_t n);
int choir_op_scale(choir_stream *s, float *x, float alpha, int64_t n);
/* x[r, :] += bias for r < rows. */
int choir_op_add_bias_rows(choir_stream *s, float *x, const float *bias, int64_t rows,
                           int64_t cols);

typedef enum choir_act {
    CHOIR_ACT_GELU_ERF = 0,
    CHOIR_ACT_GELU_TANH,
    CHOIR_ACT_SILU,
    CHOIR_ACT_RELU,
    CHOIR_ACT_SIGMOID,
    CHOIR_ACT_TANH,
    CHOIR_ACT_LEAKY_RELU /* slope `param` */
} choir_act;
/* x = act(x) over n values. */
int choir_op_act(choir_stream *s, choir_act act, float *x, int64_t n, float param);
/* Snake over x [B, C, T] (items of C channels by T samples):
 * x += sin^2(alpha[c] x) / alpha[c]. */
int choir_op_snake(choir_stream *s, float *x, int64_t B, int64_t C, int64_t T,
                   const float *alpha);

/* --- normalisation --------------------------------------------------------------- */
/* Per row of x [rows, dim]: (x - mean) / sqrt(var + eps) * gamma + beta
 * (gamma, beta NULL: 1, 0); y may equal x. */
int choir_op_layer_norm(choir_stream *s, const float *x, float *y, int64_t rows, int64_t dim,
                        const float *gamma, const float *beta, float eps);
/* choir_op_layer_norm from f32 rows x into bf16 rows y (rounded to nearest
 * even), the input of choir_op_linear_bf16. */
int choir_op_layer_norm_bf16(choir_stream *s, const float *x, uint16_t *y, int64_t rows,
                             int64_t dim, const float *gamma, const float *beta, float eps);
/* Per row: x / sqrt(mean(x^2) + eps) * gamma (NULL: 1); y may equal x. */
int choir_op_rms_norm(choir_stream *s, const float *x, float *y, int64_t rows, int64_t dim,
                      const float *gamma, float eps);
/* choir_op_rms_norm from f32 rows x into bf16 rows y (uint16 storage, each
 * value the f32 norm's rounded to nearest even): the input of
 * choir_op_linear_bf16 without a conversion pass (VibeVoice's encoder
 * FFNs). */
int choir_op_rms_norm_bf16(choir_stream *s, const float *x, uint16_t *y, int64_t rows, int64_t dim,
                           const float *gamma, float eps);
/* Per item of x [B, C, T] and group of C / groups channels: normalise over
 * the group's channels and samples (biased variance), then gamma[c], beta[c]
 * (NULL: 1, 0). groups == C is instance norm. y may equal x. */
int choir_op_group_norm(choir_stream *s, const float *x, float *y, int64_t B, int64_t C,
                        int64_t T, int64_t groups, const float *gamma, const float *beta,
                        float eps);
/* AdaIN over items of different lengths (Kokoro's style blocks, as
 * choir_cuda_adain): x, y [B, C, T]; item b has lens[b] valid samples (int32,
 * NULL: all T). Per item and channel: instance norm over the valid samples
 * (biased variance, eps), the norm's affine norm_w[c], norm_b[c] (either may
 * be NULL), then y = (1 + gamma[c]) v + beta[c] with gamma, beta item b's
 * style at gb + b gb_stride (gamma [C] then beta [C]). Samples past an
 * item's length become 0. y may equal x. */
int choir_op_adain(choir_stream *s, const float *x, float *y, int64_t B, int64_t C, int64_t T,
                   const int32_t *lens, const float *norm_w, const float *norm_b,
                   const float *gb, int64_t gb_stride, float eps);
/* Softmax of each row of x [rows, dim], in place. */
int choir_op_softmax(choir_stream *s, float *x, int64_t rows, int64_t dim);
/* Greedy selection: out[r] (int32) = choir_argmax_f32(x + r cols, cols) for
 * r < rows, each row's first index of its largest value (a NaN is never
 * picked, except that a row starting with NaN gives 0: the plain host
 * loop's answer). A decoding step brings back these ids instead of its
 * logits; inside a recorded graph like any other operation. cols at most
 * INT32_MAX. */
int choir_op_argmax_rows(choir_stream *s, const float *x, int64_t rows, int64_t cols, int32_t *out);

/* --- layout ------------------------------------------------------------------------- */
/* dst [C, R] = src [R, C]^T (+ add [C, R] when not NULL); no aliasing. A
 * convolution's channels-first output made time-major, positions added. */
int choir_op_transpose(choir_stream *s, const float *src, int64_t R, int64_t C, const float *add,
                       float *dst);

/* Rotary position embedding in place on x [rows, ld] holding n_head heads of
 * Dh values at the row's start: row r is at position pos[r] (int32 backend
 * memory); each pair of a head turns by angle pos * theta^(-2i / rot_dims)
 * for i < rot_dims / 2 (rot_dims <= Dh, even; 0: Dh). Pairs are
 * (i, i + rot_dims / 2) (rotate-half, Llama / Qwen) unless `interleaved`
 * ((2i, 2i + 1)). */
int choir_op_rope(choir_stream *s, float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh,
                  int64_t rot_dims, const int32_t *pos, float theta, bool interleaved);

/* --- convolutions (PyTorch semantics, zero padding) ---------------------------------- */
/* y [B, Cout, Tout] = conv1d(x [B, Cin, T]) per item; weight [Cout,
 * Cin/groups, K] f32, bias [Cout] or NULL; Tout = choir_conv1d_out_len. */
int choir_op_conv1d(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                    const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                    int stride, int padding, int dilation, int groups, float *y);
/* choir_op_conv1d (groups 1) with the products on bf16 operands: x and the
 * weight rounded to bf16, f32 accumulation (CUDA: im2col in bf16 and a
 * tensor-core product), f32 y. The CPU rounds both and runs choir_conv1d
 * (the oracle). */
int choir_op_conv1d_bf16(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                         const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                         int stride, int padding, int dilation, float *y);
/* y [B, Cout, Tout] = conv_transpose1d(x [B, Cin, T]); weight [Cin,
 * Cout/groups, K]; Tout = choir_conv_transpose1d_out_len. */
int choir_op_conv_transpose1d(choir_stream *s, const float *x, int64_t B, int64_t Cin, int64_t T,
                              const float *weight, const float *bias, int64_t Cout,
                              int64_t kernel, int stride, int padding, int output_padding,
                              int dilation, int groups, float *y);

/* --- recurrent ------------------------------------------------------------------------ */
/* Bidirectional one-layer LSTM over B sequences (as choir_cuda_bilstm):
 * x [B, T, In]; w_ih [2, 4H, In], w_hh [2, 4H, H] (forward direction first,
 * gates i, f, g, o); bias [2, 4H] (b_ih + b_hh) or NULL; lens int32 [B]
 * (NULL: all T): sequence b has lens[b] steps and its reverse direction
 * starts at its last one. y [B, T, 2H] = [forward h_t; reverse h_t], zeros
 * past a sequence's length. Zero initial state. */
int choir_op_bilstm(choir_stream *s, const float *x, int64_t B, int64_t T, int64_t In, int64_t H,
                    const float *w_ih, const float *w_hh, const float *bias, const int32_t *lens,
                    float *y);

/* --- audio ------------------------------------------------------------------------------ */
/* Inverse STFT from log-magnitude and phase rows (iSTFTNet's tail, as
 * choir_cuda_istft_magphase): P [B, n_fft + 2, F], rows 0..n_fft/2 the
 * log-magnitudes, the rest phases-before-sine; spectrum exp(mag) e^{i sin(ph)};
 * torch.istft with center, periodic Hann window of n_fft, hop `hop`.
 * out [B, hop (F - 1)]; frames int32 [B] (NULL: all F): item b has
 * frames[b] frames and hop (frames[b] - 1) samples, the rest zeroed. n_fft
 * even, <= 64. */
int choir_op_istft_magphase(choir_stream *s, const float *P, int64_t B, int64_t F,
                            const int32_t *frames, int n_fft, int hop, float *out);

#ifdef __cplusplus
}
#endif
#endif
