/* choir/cuda.h: the CUDA backend (NVIDIA GPUs, built for sm_90 / Hopper).
 *
 * Present only when choir is configured with -DCHOIR_CUDA=ON and nvcc is
 * found; code that uses it tests `#ifdef CHOIR_HAVE_CUDA` (defined for every
 * target that links choir_cuda).
 *
 * Model: one context (choir_cuda) per device, holding one CUDA stream, the
 * cuBLAS handle and the device-memory counters. Every kernel call below is
 * enqueued on that stream and returns once it is queued (asynchronously);
 * results are visible after choir_cuda_sync() or a download. Calls on one
 * context must come from one thread at a time, and from a thread whose
 * current CUDA device is the context's (choir_cuda_init makes it current for
 * the calling thread; the context does not switch devices per call).
 *
 * Pointers named `d_*` or documented as "device" are device memory from
 * choir_cuda_buf_alloc. Activations are row-major float32 with the same shapes
 * and semantics as the CPU reference kernels in choir/kernels.h, which are the
 * test oracle (tests/cuda/cuda_check.c).
 *
 * Errors: functions return 0 or a negative CHOIR_E* code and fill `err`
 * (may be NULL). A CUDA failure (launch error, device fault, out of memory)
 * is CHOIR_EINTERNAL or CHOIR_ENOMEM with the CUDA error string in the
 * message; after a device fault the context is unusable and must be freed. */
#ifndef CHOIR_CUDA_H
#define CHOIR_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"
#include "choir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- context ----------------------------------------------------------- */

typedef struct choir_cuda choir_cuda;

typedef struct choir_cuda_props {
    char name[256];
    int device;
    int cc_major, cc_minor;        /* compute capability (9.0 on Hopper) */
    int sm_count;                  /* streaming multiprocessors */
    int64_t total_bytes;           /* device memory */
    int64_t l2_bytes;
    int64_t smem_per_block_optin;  /* shared memory a block may opt in to, bytes */
    int mem_clock_khz, mem_bus_bits; /* for the theoretical bandwidth */
} choir_cuda_props;

/* Number of CUDA devices visible; 0 when there is no driver or no device
 * (never an error: callers fall back to the CPU). */
int choir_cuda_device_count(void);

/* Fills *out with device `device`'s properties (0-based) without opening a
 * context on it (no stream, no cuBLAS handle, no device memory). Returns 0,
 * CHOIR_ENOTFOUND when there is no such device, or CHOIR_EINTERNAL. */
int choir_cuda_device_props(int device, choir_cuda_props *out, choir_err *err);

/* Opens device `device` (0-based): creates a stream and a cuBLAS handle
 * with its own 32 MiB workspace (counted in choir_cuda_mem_current; it keeps
 * captured products from allocating).
 * NULL (and err) when the device is missing or the driver fails. Free with
 * choir_cuda_free (which frees nothing the caller allocated: buffers must be
 * freed first; leaks show in choir_cuda_mem_current). */
choir_cuda *choir_cuda_init(int device, choir_err *err);
void choir_cuda_free(choir_cuda *cu);
/* Makes the context's device current for the calling thread (a context made
 * on one thread and used from another, as by engine workers). Cheap when it
 * already is. Returns 0 or CHOIR_EINTERNAL. */
int choir_cuda_make_current(choir_cuda *cu, choir_err *err);
/* Lets cuBLAS run the f32 products (f32 GEMM and f32-weight linears above 8
 * rows, attention scores from 32 query rows, im2col conv1d) on the tensor
 * cores in TF32 (10-bit mantissa, about 1e-3 relative error, several times
 * the f32 throughput): for models whose weights are bf16 anyway. Off by
 * default, so that f32 products stay true f32 and match the CPU reference.
 * Returns 0 or CHOIR_EINTERNAL. */
int choir_cuda_set_tf32(choir_cuda *cu, bool on, choir_err *err);
/* Properties read at init; valid as long as the context. */
const choir_cuda_props *choir_cuda_get_props(const choir_cuda *cu);
/* Waits for all work queued on the context's stream. Reports asynchronous
 * kernel faults. */
int choir_cuda_sync(choir_cuda *cu, choir_err *err);
/* Starts (true) or stops (false) the profiler's collection for the whole
 * process (cudaProfilerStart / Stop): `ncu --profile-from-start off` then
 * profiles only the kernels launched in between. */
void choir_cuda_profiler(bool on);
/* The context's cudaStream_t, as void * to keep CUDA headers out of C code
 * (for capture into CUDA graphs and for events in benchmarks). */
void *choir_cuda_stream(choir_cuda *cu);

/* --- CUDA graphs -------------------------------------------------------- */
/* The per-token decoder loop launches the same kernels with the same
 * pointers every step; capturing them once into a graph and replaying it
 * removes the launch overhead. Everything that changes between steps must
 * live in device memory (token ids, positions, kv_len) and be updated before
 * each replay. While capturing, kernels are recorded, not run; calls must not
 * allocate (run the step once outside capture first, or reserve the scratch,
 * so that the context scratch has its size) and must not download. A graph
 * holds the scratch's address: while any graph is alive the scratch cannot
 * grow, and a call that would need more fails with CHOIR_EBUSY. Free graphs
 * before their context. */
typedef struct choir_cuda_graph choir_cuda_graph;

/* Starts recording the context's stream. */
int choir_cuda_graph_begin(choir_cuda *cu, choir_err *err);
/* Stops recording and instantiates the graph; NULL (and err) when a call in
 * between failed or was not capturable. The stream is usable again either way. */
choir_cuda_graph *choir_cuda_graph_end(choir_cuda *cu, choir_err *err);
/* Enqueues one replay on the context's stream (asynchronous). */
int choir_cuda_graph_launch(choir_cuda *cu, choir_cuda_graph *g, choir_err *err);
/* NULL is a no-op. */
void choir_cuda_graph_free(choir_cuda_graph *g);

/* --- timing and the card's ceilings ------------------------------------ */

/* A pair of CUDA events on the context's stream: _begin records the first
 * (NULL and err on failure), _end_ms records the second, waits for it and
 * returns the milliseconds of stream work between the two (negative and err
 * on failure); it frees the timer either way. _free drops an unfinished
 * timer (NULL is a no-op). */
typedef struct choir_cuda_timer choir_cuda_timer;
choir_cuda_timer *choir_cuda_timer_begin(choir_cuda *cu, choir_err *err);
double choir_cuda_timer_end_ms(choir_cuda_timer *t, choir_err *err);
void choir_cuda_timer_free(choir_cuda_timer *t);

/* Measures the card's ceilings, for rooflines: *bf16_tflops from an
 * 8192 x 8192 x 8192 bf16 product through cuBLAS (f32 accumulation; 2*n^3
 * FLOPs), *copy_gbs from a device-to-device copy of 2 GiB counting the bytes
 * read plus the bytes written. Each is the mean of 10 timed repetitions
 * after warm-ups, timed with CUDA events on the context's stream. Sizes are
 * halved while they do not fit in the free device memory (down to n 1024 and
 * 64 MiB). Allocates its buffers through the context (counted, subject to the
 * budget) and frees them before returning; takes about a second on an H200.
 * Must not be called while a graph is being captured. Either output may be
 * NULL. Returns 0 or a CHOIR_E* code (outputs untouched). */
int choir_cuda_measure_ceilings(choir_cuda *cu, double *bf16_tflops, double *copy_gbs,
                                choir_err *err);

/* --- device memory accounting ------------------------------------------ */
/* Device bytes are counted per context, separately from the host counters of
 * choir/alloc.h, so that the memory governor can budget both. */

/* Bytes of device memory held now through this context / the most held at
 * once since init or the last reset. Includes the context's own scratch. */
int64_t choir_cuda_mem_current(const choir_cuda *cu);
int64_t choir_cuda_mem_peak(const choir_cuda *cu);
void choir_cuda_mem_reset_peak(choir_cuda *cu);
/* Caps the device bytes this context may hold (0 = no cap, the default). An
 * allocation that would pass the cap fails with CHOIR_EBUSY and allocates
 * nothing. Lowering the cap below current usage frees nothing. */
void choir_cuda_set_budget(choir_cuda *cu, int64_t bytes);

/* Grows the context scratch (used by choir_cuda_linear above 8 rows, the
 * long attention path and conv1d) to at least `bytes` now, so that a later
 * capture or a latency-sensitive call does not allocate. Counted as device
 * memory. Returns 0, CHOIR_EBUSY (budget, or live graphs), CHOIR_ENOMEM. */
int choir_cuda_scratch_reserve(choir_cuda *cu, size_t bytes, choir_err *err);

/* --- buffers ----------------------------------------------------------- */

/* A counted block of device memory; plain data, owned by whoever allocated
 * it. A zeroed struct is an empty buffer. */
typedef struct choir_cuda_buf {
    void *ptr;    /* device pointer, aligned to 256 bytes; NULL when empty */
    size_t bytes;
} choir_cuda_buf;

/* Allocates `bytes` of device memory (uninitialised). Returns 0,
 * CHOIR_EBUSY (budget), CHOIR_ENOMEM (device full). bytes 0 gives an empty
 * buffer and returns 0. */
int choir_cuda_buf_alloc(choir_cuda *cu, size_t bytes, choir_cuda_buf *out, choir_err *err);
/* Frees the buffer and zeroes the struct; an empty buffer or NULL is a no-op.
 * Waits for no work: free only after the stream no longer uses it (the
 * CUDA runtime's cudaFree synchronises the device). */
void choir_cuda_buf_free(choir_cuda *cu, choir_cuda_buf *buf);
/* Host to device / device to host copies of `bytes` at byte `offset` in the
 * buffer. Synchronous with respect to the host memory (it may be reused on
 * return); ordered on the context's stream. CHOIR_EINVAL when the range
 * passes the end of the buffer. */
int choir_cuda_upload(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                      size_t bytes, choir_err *err);
int choir_cuda_download(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                        size_t bytes, choir_err *err);
/* Asynchronous copies: enqueued on the context's stream and returned from
 * at once. The host memory must stay untouched (upload: unchanged; download:
 * unread) until the stream has reached the copy, which choir_cuda_sync or
 * any synchronous call (choir_cuda_upload, choir_cuda_download) guarantees.
 * With pinned memory (choir_cuda_host_alloc) the copy is one DMA that runs
 * while the host goes on; with pageable memory the runtime stages it, which
 * is slower and may wait. CHOIR_EINVAL when the range passes the end of the
 * buffer. Not for use while capturing a graph. */
int choir_cuda_upload_async(choir_cuda *cu, choir_cuda_buf *dst, size_t offset, const void *src,
                            size_t bytes, choir_err *err);
int choir_cuda_download_async(choir_cuda *cu, void *dst, const choir_cuda_buf *src, size_t offset,
                              size_t bytes, choir_err *err);
/* Sets `bytes` at `offset` to zero (asynchronous). */
int choir_cuda_memset0(choir_cuda *cu, choir_cuda_buf *buf, size_t offset, size_t bytes,
                       choir_err *err);

/* --- pinned host memory ----------------------------------------------- */
/* Page-locked host memory, for buffers the device fills or reads every step
 * (a decoder's logits and inputs): copies to and from it run at the link's
 * speed and truly asynchronously. It is scarce system-wide (the kernel cannot
 * page it out), so it is counted per context, apart from both device memory
 * and the host counters of choir/alloc.h. */

/* `bytes` of pinned host memory (uninitialised, aligned to 64 bytes). NULL
 * (and err, CHOIR_ENOMEM) when the runtime refuses; bytes 0 gives NULL and
 * no error. Free with choir_cuda_host_free on the same context, after the
 * stream no longer copies to or from it. */
void *choir_cuda_host_alloc(choir_cuda *cu, size_t bytes, choir_err *err);
/* NULL is a no-op. */
void choir_cuda_host_free(choir_cuda *cu, void *p);
/* Pinned bytes held now through this context / the most held at once. */
int64_t choir_cuda_host_mem_current(const choir_cuda *cu);
int64_t choir_cuda_host_mem_peak(const choir_cuda *cu);

/* --- weights ----------------------------------------------------------- */

/* A linear layer's weight W [rows, cols] held in device memory, in the same
 * storage as its host choir_weight (f32, f16, bf16, or MLX-quantized with
 * packed codes, scales and biases). Owned by the caller; free with
 * choir_cuda_weight_free. */
typedef struct choir_cuda_weight {
    choir_weight_kind kind;
    int64_t rows, cols;
    choir_dtype sb_dtype;  /* QUANT: dtype of scales and biases */
    int bits, group_size;  /* QUANT only */
    choir_cuda_buf data;   /* values, or packed uint32 codes [rows, cols*bits/32] */
    choir_cuda_buf scales; /* QUANT: [rows, cols/group_size] */
    choir_cuda_buf biases;
} choir_cuda_weight;

/* Copies host weight `w` (which may point into a mapped checkpoint) to the
 * device, keeping its storage. The host weight is not kept. Returns 0,
 * CHOIR_EBUSY/CHOIR_ENOMEM (device memory), CHOIR_EUNSUPPORTED (quantized
 * layout not supported: bits other than 2,3,4,5,6,8 or cols not a multiple
 * of 32). On failure nothing stays allocated. */
int choir_cuda_weight_upload(choir_cuda *cu, const choir_weight *w, choir_cuda_weight *out,
                             choir_err *err);
/* As above but converts an f32 host weight to bf16 (or f16) storage on the
 * way, halving its device bytes. `to` is CHOIR_WEIGHT_BF16 or _F16. */
int choir_cuda_weight_upload_as(choir_cuda *cu, const choir_weight *w, choir_weight_kind to,
                                choir_cuda_weight *out, choir_err *err);
/* Frees its buffers and zeroes the struct; NULL or empty is a no-op. */
void choir_cuda_weight_free(choir_cuda *cu, choir_cuda_weight *w);
/* Device bytes of the weight. */
size_t choir_cuda_weight_bytes(const choir_cuda_weight *w);

/* --- matrix products --------------------------------------------------- */

/* The linear layer on the device: y[M, W.rows] = x[M, W.cols] * W^T
 * (+ bias[W.rows] if not NULL); x, bias, y device f32, y must not alias x.
 * Accumulation is always f32. Paths (choir_cuda_linear_path below): one row,
 * and up to 8 rows of f32 or quantized weights, use choir's GEMV kernels
 * that read the weight once in its storage (the decoder's per-token case);
 * f16/bf16 weights from CHOIR_CUDA_SKINNY_FROM to _TO rows the skinny
 * tensor-core kernel (x rounded to the weight's type); larger M cuBLAS (f32
 * weights: f32 GEMM; f16/bf16: x is converted to the weight's dtype and
 * multiplied on the tensor cores; quantized: W is dequantized to bf16 in
 * scratch first). Scratch comes from the context and is counted. */
int choir_cuda_linear(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                      const float *bias, float *y, choir_err *err);
/* Whether choir_cuda_linear_ex fuses its step for M rows of W (the GEMV path
 * over dense weights, up to 8 rows); otherwise it fails with
 * CHOIR_EUNSUPPORTED and the caller runs the two operations. */
bool choir_cuda_linear_fuses(int64_t M, const choir_cuda_weight *W);
/* choir_cuda_linear with one step in the GEMV's epilogue: accumulate, y +=
 * x W^T + bias; gelu, y = GELU_erf(x W^T + bias) (not both): the same floats
 * as the product followed by the add or the activation kernel. */
int choir_cuda_linear_ex(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                         const float *bias, float *y, bool accumulate, bool gelu, choir_err *err);
/* y += x W^T + bias on the skinny tensor-core path (the rows a batched
 * decode step's o and down projections take): the same floats as
 * choir_cuda_linear into a buffer and an add, without the buffer's pass.
 * _ok: whether M rows of W at x take that path (x 16-byte aligned) and the
 * switch is on (on by default since its H100 run of 7 Dec 2026;
 * CHOIR_CUDA_SKINNY_ACC=0, read once, turns it off; _set: 1 on, 0 off, -1
 * from the environment). */
void choir_cuda_skinny_acc_set(int on);
bool choir_cuda_linear_skinny_acc_ok(int64_t M, const float *x, const choir_cuda_weight *W);
int choir_cuda_linear_skinny_acc(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                                 const float *bias, float *y, choir_err *err);

/* Where a product's output rows also go (a KV cache): row m to
 * dst + slot[m] slot_stride + pos[m] ld (elements; slot NULL: slot m), as
 * choir_cuda_rows_scatter / _bf16 write them. dst NULL: nowhere. */
typedef struct choir_cuda_rows_out {
    void *dst;
    bool bf16;                  /* bf16 elements, rounded to nearest even; else f32 */
    int64_t slot_stride, ld;    /* elements */
    const int32_t *slot, *pos;  /* device int32 [M] */
} choir_cuda_rows_out;

/* A layer norm feeding up to CHOIR_CUDA_NORM_LINEAR_MAX linear layers of
 * the same input width (a pre-norm block's q/k/v, its cross query, its MLP's
 * first layer, a decoder's output projection). */
#define CHOIR_CUDA_NORM_LINEAR_MAX 4
typedef struct choir_cuda_norm_linear_params {
    const float *gamma, *beta; /* [K] (either may be NULL: 1, 0) */
    float eps;
    int n;                     /* layers, 1..CHOIR_CUDA_NORM_LINEAR_MAX */
    choir_cuda_weight W[CHOIR_CUDA_NORM_LINEAR_MAX];    /* views, [rows_i, K], one kind */
    const float *bias[CHOIR_CUDA_NORM_LINEAR_MAX];      /* [rows_i] or NULL */
    float *y[CHOIR_CUDA_NORM_LINEAR_MAX];               /* [M, rows_i] */
    choir_cuda_rows_out store[CHOIR_CUDA_NORM_LINEAR_MAX];
    bool gelu;                 /* y_i = GELU_erf(...) */
    bool rms;                  /* the RMS norm of choir_cuda_rms_norm (gamma only) */
} choir_cuda_norm_linear_params;
/* Whether choir_cuda_norm_linear runs M rows of p as one kernel: every
 * layer on the GEMV path (choir_cuda_linear_fuses) in one dense kind, and
 * M x K floats within 46 KiB (a block's shared memory). */
bool choir_cuda_norm_linear_fuses(int64_t M, const choir_cuda_norm_linear_params *p);
/* Off: choir_cuda_norm_linear_fuses is false for every call, so the backend
 * runs the layer norm and the products apart (on by default). Process-wide;
 * for benches and checks. */
void choir_cuda_norm_linear_set(bool on);
/* y_i = LN(x) W_i^T + bias_i (GELU'd with p->gelu), each also written to
 * p->store[i]: one kernel whose blocks each normalise x [M, K] into shared
 * memory with the statistics of choir_cuda_layer_norm (of choir_cuda_rms_norm
 * with p->rms), then run the GEMV's warps over the layers' rows stacked (q,
 * k and v in one launch). The same floats, bit for bit, as
 * choir_cuda_layer_norm (choir_cuda_rms_norm) into a buffer, then
 * choir_cuda_linear (or _linear_ex with gelu) per layer and
 * choir_cuda_rows_scatter(_bf16) of y_i. CHOIR_EUNSUPPORTED when
 * choir_cuda_norm_linear_fuses is false (the caller runs those calls). */
int choir_cuda_norm_linear(choir_cuda *cu, const float *x, int64_t M,
                           const choir_cuda_norm_linear_params *p, choir_err *err);

/* Fused rows (issue #23: VibeVoice's prefill, whose products are cuBLAS's
 * over bf16 weights with f32 rows between them): the bf16 input of such a
 * product written by the pass before it (the RMS norm, the SwiGLU) instead
 * of an f32 row that choir_cuda_linear converts, and a residual add through
 * cuBLAS's C operand (beta 1) instead of a product into a temporary and an
 * add. The three calls below; the backend takes them where
 * choir_cuda_rows_ok holds. Off by default (written 6 Dec 2026, not yet run
 * on a GPU): CHOIR_CUDA_FUSED_ROWS=1 in the environment turns it on (read at
 * the first use) unless choir_cuda_fused_rows set it. Process-wide. */
void choir_cuda_fused_rows(bool on);
bool choir_cuda_fused_rows_on(void);
/* The switch on, W bf16, and choir_cuda_linear's path for M rows of W
 * cuBLAS's. */
bool choir_cuda_rows_ok(int64_t M, const choir_cuda_weight *W);
/* choir_cuda_rms_norm of x [M, K] (p->rms, p->beta NULL) then
 * choir_cuda_linear per layer of p (p->gelu and p->store not applied: the
 * caller's), with the norm written once as bf16 rows into h (M K 2 bytes of
 * device memory) and each product reading them: the same floats, since
 * choir_cuda_linear rounds its f32 input to bf16 as choir_cuda_rms_norm_bf16
 * rounds the norm. CHOIR_EUNSUPPORTED unless every layer passes
 * choir_cuda_rows_ok. */
int choir_cuda_norm_linear_rows(choir_cuda *cu, const float *x, int64_t M,
                                const choir_cuda_norm_linear_params *p, void *h, choir_err *err);
/* y += x W^T (no bias), x rounded to bf16 in scratch as choir_cuda_linear
 * does, the add in cuBLAS's epilogue: the floats of choir_cuda_linear into a
 * temporary then choir_cuda_add (one f32 rounding of y + the f32 sum either
 * way), unless cuBLAS picks another algorithm (order of the sum) for
 * beta 1. CHOIR_EUNSUPPORTED unless choir_cuda_rows_ok. */
int choir_cuda_linear_acc_rows(choir_cuda *cu, const float *x, int64_t M, const choir_cuda_weight *W,
                               float *y, choir_err *err);
/* h = SiLU(gate) up over [M, W.cols] (choir_cuda_swiglu's floats) rounded
 * to bf16 in scratch, then y = h W^T + bias, or with accumulate (no bias)
 * y += h W^T as choir_cuda_linear_acc_rows: what choir_cuda_swiglu then
 * choir_cuda_linear (and the add) give, without writing gate.
 * CHOIR_EUNSUPPORTED unless choir_cuda_rows_ok (and no bias with
 * accumulate). */
int choir_cuda_swiglu_linear_rows(choir_cuda *cu, const float *gate, const float *up, int64_t M,
                                  const choir_cuda_weight *W, const float *bias, float *y, bool accumulate,
                                  choir_err *err);

/* A pre-norm gated MLP over bf16 rows (issue #23): with fused rows on and
 * this on too (on by default since it ran on an H100 on 7 Dec 2026;
 * CHOIR_CUDA_MLP_BF16=0 or choir_cuda_mlp_bf16 turns it off), choir_op_gated_mlp keeps gate and up in bf16:
 * the products written rounded to bf16 (half the bytes of f32 rows, written
 * and read once each), the SwiGLU over them in place, then the down product
 * added into x. Unlike fused rows alone this changes the floats: gate and
 * up rounded (within the bf16 bound of the f32 path). Process-wide. */
void choir_cuda_mlp_bf16(bool on);
bool choir_cuda_mlp_bf16_on(void);
/* Both switches on, every weight passing choir_cuda_rows_ok, and the shapes
 * of a gated MLP (Wg, Wu [I, H], Wd [H, I]). */
bool choir_cuda_gated_mlp_ok(int64_t M, const choir_cuda_weight *Wg, const choir_cuda_weight *Wu,
                             const choir_cuda_weight *Wd);
/* x [M, H] += (SiLU(g) u) Wd^T with g, u = rms_norm(x) Wg^T, Wu^T: the norm
 * as bf16 rows into h (M H 2 bytes), g and u as bf16 rows into gate and up
 * (M I 2 bytes each), the SwiGLU in place in gate, the down product through
 * cuBLAS's C operand (beta 1). CHOIR_EUNSUPPORTED unless
 * choir_cuda_gated_mlp_ok. */
int choir_cuda_gated_mlp_rows(choir_cuda *cu, float *x, int64_t M, const float *gamma, float eps,
                              const choir_cuda_weight *Wg, const choir_cuda_weight *Wu, const choir_cuda_weight *Wd,
                              void *gate, void *up, void *h, choir_err *err);

/* Prefill products in one (issue #23, VibeVoice 7B's prefill; on by
 * default since it ran on an H100 on 7 Dec 2026; CHOIR_VV_PREFILL_FUSED=0 in
 * the environment turns it off at the first use unless
 * choir_cuda_prefill_fused set it; process-wide). The backend takes the
 * two calls below where a layer's weights lie one after another in device
 * memory (choir_backend_weight_group) and choir_cuda_rows_ok holds. */
void choir_cuda_prefill_fused(bool on);
bool choir_cuda_prefill_fused_on(void);
/* q, k and v of x [M, K] in one product: the RMS norm (gamma, eps) as bf16
 * rows into h (M K 2 bytes), times Wqkv [(n_heads + 2 n_kv) Dh, K] (bf16: q's
 * rows, then k's, then v's) into f32 rows in the context's scratch, then
 * one pass adding bias[0..2] (each NULL: none) and rotating q's n_heads and
 * k's n_kv heads of Dh values at positions pos (device int32 [M];
 * rotate-half over all Dh, choir_cuda_rope's floats) into q [M, n_heads Dh],
 * k and v [M, n_kv Dh]. CHOIR_EUNSUPPORTED unless the switch is on and
 * choir_cuda_rows_ok(M, Wqkv) (Dh even, at most 1024). */
int choir_cuda_qkv_rope_rows(choir_cuda *cu, const float *x, int64_t M, const float *gamma, float eps,
                             const choir_cuda_weight *Wqkv, const float *const bias[3], int n_heads, int n_kv,
                             int64_t Dh, const int32_t *pos, float theta, float *q, float *k, float *v, void *h,
                             choir_err *err);
/* choir_cuda_gated_mlp_rows with gate and up as one weight Wgu [2I, H] (gate's
 * rows, then up's): the norm as bf16 rows into h (M H 2 bytes), one product
 * into bf16 rows gu [M, 2I] (M I 4 bytes), SiLU(g) u rounded to bf16 into hb
 * [M, I] (the floats of choir_cuda_gated_mlp_rows: gate and up rounded to
 * bf16), then x += hb Wd^T through cuBLAS's C operand. CHOIR_EUNSUPPORTED
 * unless the switch is on and Wgu and Wd pass choir_cuda_rows_ok. */
int choir_cuda_gated_mlp_cat_rows(choir_cuda *cu, float *x, int64_t M, const float *gamma, float eps,
                                  const choir_cuda_weight *Wgu, const choir_cuda_weight *Wd, void *gu, void *hb,
                                  void *h, choir_err *err);

/* The paths of choir_cuda_linear. GEMV: one warp per output row, every row
 * of x in f32 (up to 8 rows). SKINNY: f16/bf16 weights, up to
 * CHOIR_CUDA_SKINNY_MAX_ROWS rows, K a multiple of 8: each weight element
 * read once and applied to all rows on the tensor cores (x rounded to the
 * weight's type, f32 accumulation; one block of warps per tile of 16 or 32
 * output columns splitting K, summed in a fixed order). BLAS: cuBLAS. AUTO
 * picks by row count from measurements on an H200 (docs/PERFORMANCE.md):
 * choir_cuda_linear_path_for says which. */
typedef enum choir_cuda_linear_path {
    CHOIR_CUDA_LINEAR_AUTO = 0,
    CHOIR_CUDA_LINEAR_GEMV,
    CHOIR_CUDA_LINEAR_SKINNY,
    CHOIR_CUDA_LINEAR_BLAS,
} choir_cuda_linear_path;
#define CHOIR_CUDA_SKINNY_MAX_ROWS 32
/* AUTO's row counts: SKINNY (where it applies) from .._SKINNY_FROM to
 * .._SKINNY_TO rows (none while TO < FROM); otherwise f16/bf16 weights take
 * the GEMV up to CHOIR_CUDA_GEMV_HALF_ROWS rows and cuBLAS above, f32 and
 * quantized weights the GEMV up to 8 rows and cuBLAS above. */
#define CHOIR_CUDA_SKINNY_FROM 2
#define CHOIR_CUDA_SKINNY_TO 16
#define CHOIR_CUDA_GEMV_HALF_ROWS 1
/* The path choir_cuda_linear takes for M rows of W under the current
 * setting (never AUTO). */
choir_cuda_linear_path choir_cuda_linear_path_for(int64_t M, const choir_cuda_weight *W);
/* Forces a path for every later choir_cuda_linear; where it does not apply
 * (GEMV above 8 rows, SKINNY outside its conditions), the choice made before
 * the skinny kernel: GEMV up to 8 rows, cuBLAS above (so forcing GEMV gives
 * exactly that older dispatch). AUTO restores the default. Process-wide; for
 * benches and checks. */
void choir_cuda_linear_force(choir_cuda_linear_path p);

/* Plain row-major f32 GEMM on the device, as choir_gemm_f32 (cuBLAS,
 * f32 compute, no TF32). */
int choir_cuda_gemm_f32(choir_cuda *cu, bool trans_a, bool trans_b, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc, choir_err *err);

/* Row-major C[M,N] (f32) = A[M,K] * B[N,K]^T with A and B bf16 (uint16
 * storage), f32 accumulation on the tensor cores. For the roofline bench and
 * for models that keep bf16 activations. */
int choir_cuda_gemm_bf16_nt(choir_cuda *cu, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                            const uint16_t *B, float *C, choir_err *err);

/* y[M, N] = x[M, K] W^T with x bf16 rows (uint16 storage) and W bf16
 * (CHOIR_EUNSUPPORTED for other storage), f32 accumulation on the tensor
 * cores. y_bf16: y is bf16, the product rounded, then bias (may be NULL)
 * and, with gelu, GELU (erf) applied in one pass and rounded again (N a
 * multiple of 8). Otherwise y is f32: written, or with `accumulate` added to
 * (y += x W^T + bias, the residual stream). */
int choir_cuda_linear_bf16(choir_cuda *cu, const uint16_t *x, int64_t M,
                           const choir_cuda_weight *W, const float *bias, void *y, bool y_bf16,
                           bool accumulate, bool gelu, choir_err *err);
/* With a bias, choir_cuda_linear_bf16 runs cublasLt with the bias in its
 * epilogue (rounded to bf16 first for bf16 y) unless this is off (on by
 * default; for the bench's comparison). Process-wide. */
void choir_cuda_linear_bf16_set_lt(bool on);
/* On, choir_cuda_linear's cuBLAS path over bf16 weights (f32 rows in and
 * out, more rows than the skinny kernel takes) adds a bias in cublasLt's
 * epilogue instead of a pass over y afterwards: VibeVoice's encoders spend
 * 17% of their kernel time in that pass (ncu, H100, 6 Dec 2026). Off by
 * default: written 6 Dec 2026 evening, not yet run on a GPU. Process-wide. */
void choir_cuda_linear_set_bias_epilogue(bool on);
/* The shape of the one-row GEMVs over bf16 or f16 weights (a decode step's
 * products): one of 0 .. choir_cuda_gemv_variants() - 1 (rows a warp, loads
 * a batch, a load hint, the grid; all give the same floats), for timing
 * them side by side; any other value (-1) restores the default. */
int choir_cuda_gemv_variants(void);
void choir_cuda_gemv_set_variant(int v);
/* Programmatic dependent launch of a decode step's products: the one-row
 * GEMVs over bf16 or f16 weights (the default shape) and over 8-bit
 * weights (shape 7), and the skinny tensor-core products of 2 to 8 rows
 * (Hopper's griddepcontrol; a draft of 8 Dec 2026, NOT RUN ON A GPU), and
 * the step's kernels between them (VibeVoice's ropes and cache rows, its
 * decode attention, SwiGLU), which wait at their start: 0 off (the
 * default), 1: each such product is launched so that its
 * blocks may start while the kernel before it in the stream drains; they
 * issue their first weight loads, wait for that kernel's results, then run
 * as before (the same floats; the skinny kernel loads nothing before it
 * waits); 2: as 1, and each block of the 16-bit kernels also asks L2 for
 * its first weight rows (GEMV: up to 8 KB a warp; skinny: 4 KB a row)
 * before it waits (the 8-bit one as 1). Until
 * choir_cuda_pdl_set is called, CHOIR_CUDA_PDL=N picks it. Process-wide;
 * a captured graph keeps the mode it was captured with. */
void choir_cuda_pdl_set(int mode);
int choir_cuda_pdl(void);
/* The tensor-core GEMV for 1 to 32 rows of x over bf16 or 8-bit weights
 * (src/tensor/cuda/cuda_gemv_mma.cu): where it is on, choir_cuda_linear,
 * _linear_ex and _norm_linear take it for such products (the rows of x split
 * into two bf16 halves, so within about 2^-16 of the f32 products; row m of y
 * the same bit for bit whatever M), and choir_cuda_linear_fuses /
 * _norm_linear_fuses say so; choir_cuda_norm_linear's floats are then within
 * 2e-5 of (no longer equal to) the norm followed by choir_cuda_linear (its
 * RMS norm scales the sums, not x). Modes: 0 off, 1 on for every weight it
 * takes, 2 auto (the default since its H100 run of 7 Dec 2026): 8-bit
 * weights at 5 to 8 rows of x, where it beat the CUDA-core GEMV; never bf16,
 * where the skinny kernel is faster, nor 8-bit at 1-4 rows (the CUDA-core
 * GEMV) or 9-32 (the dequantizing cuBLAS path).
 * Until choir_cuda_gemv_mma_set is called, CHOIR_GEMV_MMA=1 or 0 picks mode 1
 * or 0; set(-1) goes back to the environment's. Process-wide; for checks and
 * benches. choir_cuda_gemv_mma_on: whether mode 1 is set. */
void choir_cuda_gemv_mma_set(int mode);
int choir_cuda_gemv_mma_mode(void);
bool choir_cuda_gemv_mma_on(void);
/* The mma GEMV's launch over up to 8 rows of x and 8-bit weights, for
 * timing side by side (all give the same floats: a row's order of sums
 * depends on K only): 0 two 16-row tiles a block and one step of loads in
 * flight a warp, 1 one tile and two steps, 2 (the default) one tile and
 * three (two with the RMS norm fused). Until _set is called,
 * CHOIR_GEMV_MMA_Q8_SHAPE=N (read once); set(-1) goes back to it.
 * Process-wide. */
#define CHOIR_GEMV_MMA_Q8_SHAPES 3
void choir_cuda_gemv_mma_q8_shape_set(int shape);
int choir_cuda_gemv_mma_q8_shape(void);
/* The GEMV over 8-bit MLX weights for 1 to 8 rows of x (a decode step over
 * an 8-bit language model): shape 0 is the old kernel (a warp a row, 32
 * codes a lane by scalar loads, x read from global memory for every row);
 * 1, 2, 3 the kernel of cuda_linear_q8.cu (16-byte loads with the L2 hint,
 * x staged once per block in shared memory, the RMS norm before the
 * products fused as for bf16 weights: choir_cuda_norm_linear and
 * choir_cuda_linear_ex then fuse 8-bit layers too) with 2 rows a warp and
 * batches of 2 steps, 1 row and 4, 4 rows and 2. Other bit widths keep the
 * old kernel. The same products within f32 rounding (the sums in another
 * order). Shapes 4-6 stream rows through resident warps (1 row and 4 steps
 * in flight, 1 and 8, 2 and 4); 7 is shape 4's kernel within 64 registers
 * (four blocks an SM) for one row of x, shape 4 for more; 8 is 7 (4 for
 * more rows) with x staged in one pass of 16-byte loads, the same floats
 * (a draft of 7 Dec 2026, night, NOT RUN ON A GPU). Shape 7 by
 * default since an H100 run of 7 Dec 2026, evening (the 8-bit 7B step as a
 * graph, one process: shape 4 7.35 ms, shape 7 6.08; in the morning, another
 * H100: old kernel 12.27 ms, shape 1 7.19, shape 4 6.43); until
 * choir_cuda_q8_gemv is called, CHOIR_Q8_GEMV=N picks the shape (0: the old
 * kernel).
 * Process-wide. */
void choir_cuda_q8_gemv(int shape);
int choir_cuda_q8_gemv_shape(void);
/* With it on, the bf16 rows' GELU of that cublasLt path runs in cublasLt's
 * epilogue on the f32 sum, rounded once; it is the tanh form there, within
 * 4.7e-4 of the erf form (largest near x = -2.7, where GELU is -0.0094): on
 * by default (the Whisper encoder's fc1; its output stays within 2e-3 of the
 * CPU's erf model, below bf16's own rounding, H100 6 Dec 2026). Off, a pass
 * over the rounded product applies the erf form. Process-wide. */
void choir_cuda_linear_bf16_set_gelu_epilogue(bool on);
/* conv1d (groups 1) over B items of x [Cin, T] f32 into y [Cout, Tout] f32
 * with bf16 operands: the taps (im2col) and the weight [Cout, Cin, K]
 * rounded to bf16, f32 accumulation on the tensor cores, then the bias. */
int choir_cuda_conv1d_bf16(choir_cuda *cu, const float *x, int64_t B, int64_t Cin, int64_t T,
                           const float *weight, const float *bias, int64_t Cout, int64_t kernel,
                           int stride, int padding, int dilation, float *y, choir_err *err);
/* choir_cuda_layer_norm from f32 rows into bf16 rows (rounded). */
int choir_cuda_layer_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows,
                               int64_t dim, const float *gamma, const float *beta, float eps,
                               choir_err *err);
/* On (the default), rows of 128 n values (n <= 16, 16-byte aligned) take a
 * kernel of one warp per row; off, one block per row. Process-wide. */
void choir_cuda_layer_norm_bf16_set_warp(bool on);

/* --- elementwise and normalisation (semantics as in choir/kernels.h) ----- */
int choir_cuda_add(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err);
int choir_cuda_add_bias_rows(choir_cuda *cu, float *x, const float *bias, int64_t rows,
                             int64_t cols, choir_err *err);
int choir_cuda_gelu_erf(choir_cuda *cu, float *x, int64_t n, choir_err *err);
int choir_cuda_gelu_tanh(choir_cuda *cu, float *x, int64_t n, choir_err *err);
/* gamma/beta may be NULL; y may equal x. */
int choir_cuda_layer_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                          const float *gamma, const float *beta, float eps, choir_err *err);
int choir_cuda_softmax(choir_cuda *cu, float *x, int64_t rows, int64_t dim, choir_err *err);
/* dst[C, R] = src[R, C]^T (+ add[C, R] if not NULL): a convolution's
 * channels-first output made time-major, with positions added. No aliasing. */
int choir_cuda_transpose_add(choir_cuda *cu, const float *src, int64_t R, int64_t C,
                             const float *add, float *dst, choir_err *err);
/* B transposes in one launch: dst[b] [C, R] = src[b] [R, C]^T, rows r >=
 * lens[b] of src (device int32 [B]; NULL: none) written as zeros
 * (cuda_ragged.cu). */
int choir_cuda_transpose_lens(choir_cuda *cu, const float *src, int64_t B, int64_t R, int64_t C,
                              const int32_t *lens, float *dst, choir_err *err);
/* f32 <-> bf16 conversion of n elements (round to nearest even). */
int choir_cuda_f32_to_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t n,
                           choir_err *err);

/* Writes row b of src [B, cols] to dst + slot[b]*slot_stride + pos[b]*ld
 * (floats; slot and pos device int32 [B]): appends each sequence's new key or
 * value row to its own cache at its own position, inside a captured graph. */
int choir_cuda_rows_scatter(choir_cuda *cu, const float *src, int64_t B, int64_t cols, float *dst,
                            int64_t slot_stride, int64_t ld, const int32_t *slot,
                            const int32_t *pos, choir_err *err);

/* choir_cuda_rows_scatter into a bf16 cache (elements), each value rounded
 * to nearest even. */
int choir_cuda_rows_scatter_bf16(choir_cuda *cu, const float *src, int64_t B, int64_t cols,
                                 uint16_t *dst, int64_t slot_stride, int64_t ld,
                                 const int32_t *slot, const int32_t *pos, choir_err *err);

/* Device-to-device copy of `bytes` (asynchronous, on the context's stream;
 * the ranges must not overlap). */
int choir_cuda_copy(choir_cuda *cu, void *dst, const void *src, size_t bytes, choir_err *err);

/* --- convolution ------------------------------------------------------- */
/* conv1d as choir_conv1d: x [Cin, T], weight [Cout, Cin/groups, kernel] f32,
 * bias [Cout] or NULL, y [Cout, Tout], all device. Ungrouped convolutions with
 * Cin*kernel >= 32 run as im2col (Cin*kernel*Tout floats of context scratch)
 * and one cuBLAS f32 product; others run a direct kernel. */
int choir_cuda_conv1d(choir_cuda *cu, const float *x, int64_t Cin, int64_t T, const float *weight,
                      const float *bias, int64_t Cout, int64_t kernel, int stride, int padding,
                      int dilation, int groups, float *y, choir_err *err);

/* --- attention --------------------------------------------------------- */
/* One sequence, with exactly the semantics of choir_attention (strides in
 * floats, additive mask [Tq, Tk] or NULL, causal offset Tk - Tq, a query
 * whose keys are all masked gets zeros). All pointers device. From 32
 * query rows on (encoder windows, prompts) scores go through two batched
 * cuBLAS f32 products with n_head*Tq*Tk floats of context scratch; fewer
 * rows (decoder steps) use one block per row, which limits Tk to
 * choir_cuda_attention_max_keys(). */
int choir_cuda_attention(choir_cuda *cu, const float *q, int64_t ldq, const float *k, int64_t ldk,
                         const float *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                         int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                         bool causal, choir_err *err);

/* A batch of sequences with one KV cache each (the batched decoder step).
 * Sequence b's tensors start at q + b*q_batch, k + b*kv_batch, v + b*kv_batch
 * and out + b*out_batch (in floats) and use the row strides above. Its
 * number of valid keys is kv_len[b] (device int32 [B]; NULL: all Tk), so
 * every sequence attends to its own filled cache prefix. causal uses each
 * sequence's own length: query i sees keys <= i + (kv_len[b] - Tq). No mask.
 * kv_len lives on the device so that a captured CUDA graph can be replayed
 * as the caches grow. */
int choir_cuda_attention_batched(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                 int64_t q_batch, const float *k, int64_t ldk, const float *v,
                                 int64_t ldv, int64_t kv_batch, const int32_t *kv_len, float *out,
                                 int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                 int n_head, int64_t Dh, float scale, bool causal,
                                 choir_err *err);
/* As choir_cuda_attention_batched, but sequence b reads the KV cache number
 * kv_slot[b] (device int32 [B]): its keys start at k + kv_slot[b]*slot_stride
 * (and values at v + ...), so a batch may name any caches of a pool, in any
 * order and with repeats. kv_len (device int32 [B], NULL: all Tk) is indexed
 * by b, like q and out. For decoders whose sequences come and go (beam
 * search, windows finishing at different steps) while one captured graph is
 * replayed: only the slot and length arrays change between steps. */
int choir_cuda_attention_slots(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                               int64_t q_batch, const float *k, int64_t ldk, const float *v,
                               int64_t ldv, int64_t slot_stride, const int32_t *kv_slot,
                               const int32_t *kv_len, float *out, int64_t ldo, int64_t out_batch,
                               int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                               bool causal, choir_err *err);

/* Self-attention over n pieces stacked without padding (a batch of ALBERT
 * pieces): piece b's rows are off[b] .. off[b] + len[b] - 1 of q, k, v and
 * out (each [R, n_head Dh], row stride ld); each row attends to its own
 * piece's rows only (no mask, not causal). off, len: device int32 [n];
 * Tm >= every len[b]. Pieces go in groups (gathered head-major and padded
 * to Tm in context scratch, at most ~256 MB a group): per group two strided
 * batched cuBLAS f32 products over its pieces' heads, a softmax over each
 * piece's keys, a gather and a scatter (cuda_ragged.cu). */
int choir_cuda_attention_ragged(choir_cuda *cu, int64_t n, const float *q, const float *k,
                                const float *v, int64_t ld, const int32_t *off,
                                const int32_t *len, int64_t Tm, int n_head, int64_t Dh,
                                float scale, float *out, choir_err *err);
/* choir_cuda_attention and choir_cuda_attention_slots over keys and values
 * stored as bf16 (a KV cache in a bf16 model's dtype; strides in elements),
 * each widened to f32 as it is read: one block per query row at any Tq, so
 * Tk is limited by choir_cuda_attention_max_keys(). */
int choir_cuda_attention_kv16(choir_cuda *cu, const float *q, int64_t ldq, const uint16_t *k,
                              int64_t ldk, const uint16_t *v, int64_t ldv, float *out, int64_t ldo,
                              int64_t Tq, int64_t Tk, int n_head, int64_t Dh, float scale,
                              const float *mask, bool causal, choir_err *err);
int choir_cuda_attention_slots_kv16(choir_cuda *cu, int64_t B, const float *q, int64_t ldq,
                                    int64_t q_batch, const uint16_t *k, int64_t ldk,
                                    const uint16_t *v, int64_t ldv, int64_t slot_stride,
                                    const int32_t *kv_slot, const int32_t *kv_len, float *out,
                                    int64_t ldo, int64_t out_batch, int64_t Tq, int64_t Tk,
                                    int n_head, int64_t Dh, float scale, bool causal,
                                    choir_err *err);

/* Fused attention with every operand bf16 (uint16 storage): B sequences,
 * sequence b's queries at q + b q_batch, keys and values at + b kv_batch,
 * output at out + b out_batch (strides in elements, all multiples of 8, rows
 * 16-byte aligned). Flash-style on the tensor cores: scores and the softmax
 * in f32, the probabilities rounded to bf16 for the product with V, f32
 * accumulation, the output rounded to bf16; no score memory, any Tk. Heads
 * of 16, 32 or 64 values (CHOIR_EUNSUPPORTED otherwise); grouped-query heads as
 * choir_attn. No mask; causal as choir_attention. */
int choir_cuda_attention_bf16(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                              int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                              int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                              int64_t out_batch, int64_t Tq, int64_t Tk, int n_head,
                              int n_kv_head, int64_t Dh, float scale, bool causal,
                              choir_err *err);
/* Query rows per warp of that kernel, 32 (default) or 16: for the bench. */
void choir_cuda_attention_bf16_set_rows(int rows_per_warp);
/* Which kernel that call takes, process-wide (the bench and the checks): 1 the
 * first (k_flash_bf16), 2, 3, 4 the second (k_flash2_bf16) with 4 warps of 32
 * query rows, 8 of 32, 8 of 16 per block (heads of 64 values; others always
 * take the first). Other values: the default, 3 (the fastest of the four on
 * an H100 with the other defaults, 6 Dec 2026). */
void choir_cuda_attention_bf16_set_kernel(int kernel);
/* How many kernels set_kernel picks among (1 in the host emulation). */
int choir_cuda_attention_bf16_kernels(void);

/* The split-keys kernels for few query rows over many keys (decoder steps:
 * cross-attention to a window, self-attention over a long cache), on by
 * default; off, those calls take one block per row and head (for the bench
 * and the checks). Process-wide. */
void choir_cuda_attention_set_split(bool on);

/* Largest Tk the attention kernels accept on this device. */
int64_t choir_cuda_attention_max_keys(const choir_cuda *cu);

/* --- backend operations (cuda_ops.cu; semantics of choir/backend.h) -------- */
/* y = a * b over n values (y may alias a or b); x *= s. */
int choir_cuda_mul(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                   choir_err *err);
int choir_cuda_scale(choir_cuda *cu, float *x, float s, int64_t n, choir_err *err);
/* gate = SiLU(gate) * up over n values: the floats of choir_cuda_act(2) on
 * gate, then choir_cuda_mul(gate, up), in one kernel. */
int choir_cuda_swiglu(choir_cuda *cu, float *gate, const float *up, int64_t n, choir_err *err);
/* In place: act is a choir_act value (choir/backend.h): 2 SiLU, 3 ReLU,
 * 4 sigmoid, 5 tanh; others are CHOIR_EUNSUPPORTED (GELU and leaky ReLU have
 * their own calls). */
int choir_cuda_act(choir_cuda *cu, int act, float *x, int64_t n, choir_err *err);
/* Per row of x [rows, dim]: x / sqrt(mean(x^2) + eps) * gamma (NULL: 1);
 * the sum of squares in double. y may equal x. */
int choir_cuda_rms_norm(choir_cuda *cu, const float *x, float *y, int64_t rows, int64_t dim,
                        const float *gamma, float eps, choir_err *err);
/* The block kernel of choir_cuda_rms_norm (rows above 2048 values) with a
 * row's values loaded into registers at once (on by default since its H100
 * run of 7 Dec 2026; CHOIR_CUDA_RMS_CACHE=0, read once, turns it off): the
 * same floats; the looping
 * kernel waits for each load before its add (~13 us for a batched decode
 * step's 8 rows of 3584). _set: 1 on, 0 off, -1 from the environment.
 * Process-wide. */
void choir_cuda_rms_cache_set(int on);
bool choir_cuda_rms_cache_on(void);
/* The same norm into bf16 rows y (uint16 storage): each value the f32
 * one of choir_cuda_rms_norm (same kernel shape: a warp per row up to 2048
 * values, a block above), rounded to nearest even. */
int choir_cuda_rms_norm_bf16(choir_cuda *cu, const float *x, uint16_t *y, int64_t rows, int64_t dim,
                             const float *gamma, float eps, choir_err *err);
/* Group norm of x [B, C, T] over groups of C / groups channels (statistics in
 * double, biased variance), then gamma[c], beta[c] (NULL: 1, 0). */
int choir_cuda_group_norm(choir_cuda *cu, const float *x, float *y, int64_t B, int64_t C,
                          int64_t T, int64_t groups, const float *gamma, const float *beta,
                          float eps, choir_err *err);
/* Rotary embedding in place, as choir_op_rope (pos device int32 [rows]). */
int choir_cuda_rope(choir_cuda *cu, float *x, int64_t rows, int64_t ld, int n_head, int64_t Dh,
                    int64_t rot_dims, const int32_t *pos, float theta, bool interleaved,
                    choir_err *err);
/* choir_cuda_rope a block per row (the angles once a row in shared memory,
 * the heads spread over the block; the same floats) instead of a thread per
 * pair walking the heads. Off by default: written 6 Dec 2026 after ncu had
 * the old kernel at 10 us a launch in VibeVoice's decode step, NOT YET RUN
 * ON A GPU. Until this is called, CHOIR_ROPE_ROWS=1 turns it on.
 * Process-wide. */
void choir_cuda_rope_rows(bool on);
/* out[r, :] = row ids[r] of W (f32, f16, bf16 or MLX-quantized, dequantized
 * as choir_weight_row_f32); ids device int32 [n]; an id outside the table
 * gives a row of zeros. */
int choir_cuda_rows_gather(choir_cuda *cu, const choir_cuda_weight *W, const int32_t *ids,
                           int64_t n, float *out, choir_err *err);
/* out[r] (device int32) = the first index of row r's largest value in x
 * [rows, cols], NaNs never picked, 0 for a row starting with NaN
 * (choir_argmax_f32's answer, bit for bit). One block per row. */
int choir_cuda_argmax_rows(choir_cuda *cu, const float *x, int64_t rows, int64_t cols, int32_t *out,
                           choir_err *err);
/* rows x cols floats, row strides ldd and lds (device to device, async). */
int choir_cuda_copy_rows(choir_cuda *cu, float *dst, int64_t ldd, const float *src, int64_t lds,
                         int64_t rows, int64_t cols, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
