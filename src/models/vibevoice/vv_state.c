/* Working memory of one VibeVoice request: every buffer the encoders and the
 * language model use, planned from the dimensions and carved out of one
 * block, so the forward passes never allocate. */
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/backend_vibevoice.h"
#include "choir/kernels.h"
#include "models/vibevoice/vv_state.h"

void vv_kernels_default(const choir_vibevoice_enc_dims *d, vv_kernels *k) {
    memset(k, 0, sizeof *k);
    k->down[0] = 7;
    for (int s = 1; s < d->n_stages; s++) k->down[s] = 2 * d->ratios[s - 1];
    k->mixer = 7;
    k->head = 7;
}

void vv_kernels_of(const vv_encoder *e, vv_kernels *k) {
    memset(k, 0, sizeof *k);
    for (int s = 0; s < e->d.n_stages; s++) {
        k->down[s] = e->down[s].kernel;
        for (int b = 0; b < e->d.depths[s]; b++)
            if (e->blocks[s][b].dw_kernel > k->mixer) k->mixer = e->blocks[s][b].dw_kernel;
    }
    if (k->mixer == 0) k->mixer = 1;
    k->head = e->head.kernel;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t vv_ffn_tile(int64_t C, int ffn_mult) {
    int64_t t = (4 << 20) / (C * (ffn_mult > 0 ? ffn_mult : 4));
    return t < 16 ? 16 : t;
}

/* Floats of each encoder buffer for passes of `piece` samples. */
static void enc_sizes(const choir_vibevoice_enc_dims *d, const vv_kernels *k, int64_t piece, vv_enc_sizes *z) {
    int64_t T = piece, cin = 1, cache = 0;
    for (int s = 0; s < d->n_stages; s++) {
        int stride = s ? d->ratios[s - 1] : 1;
        int64_t C = (int64_t)d->n_filters << s, Tout = T / stride;
        /* The input with its left context, plus the slack of a last, partial tap block. */
        z->in = max64(z->in, (k->down[s] + stride + T) * cin);
        z->x = max64(z->x, Tout * C);
        z->tmp = max64(z->tmp, Tout * C);
        z->norm = max64(z->norm, (k->mixer - 1 + Tout) * C);
        int64_t F = C * d->ffn_mult, tile = vv_ffn_tile(C, d->ffn_mult);
        if (tile > Tout) tile = Tout;
        z->tile = max64(z->tile, tile * (2 * C + F));
        cache += (int64_t)(k->down[s] - stride) * cin + (int64_t)d->depths[s] * (k->mixer - 1) * C;
        T = Tout;
        cin = C;
    }
    z->in = max64(z->in, (k->head + 1 + T) * cin);
    z->tmp = max64(z->tmp, T * d->vae_dim);
    cache += (int64_t)(k->head - 1) * cin;
    z->cache = max64(z->cache, cache);
}

/* The most kernel scratch one linear call of rows x cols over M inputs
 * takes, whatever the weight's storage (f16/bf16 blocks converted for sgemm,
 * MLX-quantized input sums; f32 takes none). */
static int64_t lin_scratch(int64_t M, int64_t rows, int64_t cols) {
    choir_weight h = {.kind = CHOIR_WEIGHT_BF16, .rows = rows, .cols = cols};
    choir_weight q = {.kind = CHOIR_WEIGHT_QUANT, .rows = rows, .cols = cols, .bits = 4, .group_size = 64};
    return max64((int64_t)choir_linear_scratch_bytes(M, &h), (int64_t)choir_linear_scratch_bytes(M, &q));
}

static int64_t enc_scratch(const choir_vibevoice_enc_dims *d, const vv_kernels *k, int64_t piece) {
    int64_t T = piece, cin = 1, need = 0;
    for (int s = 0; s < d->n_stages; s++) {
        int stride = s ? d->ratios[s - 1] : 1;
        int64_t C = (int64_t)d->n_filters << s, Tout = T / stride;
        if (s) need = max64(need, lin_scratch(Tout, C, (int64_t)stride * cin));
        int64_t F = C * d->ffn_mult, tile = vv_ffn_tile(C, d->ffn_mult);
        if (tile > Tout) tile = Tout;
        need = max64(need, max64(lin_scratch(tile, F, C), lin_scratch(tile, C, F)));
        T = Tout;
        cin = C;
    }
    (void)k;
    return max64(need, lin_scratch(T, d->vae_dim, cin));
}

/* Lays out the whole block: sizes in floats, offsets when `s` is given. */
static int64_t layout(const choir_vibevoice_dims *dims, const vv_kernels k[2], const choir_vibevoice_plan *p,
                      choir_vibevoice_state *s, int64_t *scratch) {
    int64_t piece = p->enc_piece > 0 ? p->enc_piece : (int64_t)VV_DEFAULT_PIECE_HOPS * dims->hop;
    piece -= piece % dims->hop;
    if (piece <= 0) piece = dims->hop;
    if (p->max_samples > 0 && piece > p->max_samples) piece = p->max_samples + (dims->hop - p->max_samples % dims->hop) % dims->hop;
    vv_enc_sizes z = {0};
    enc_sizes(&dims->acoustic, &k[0], piece, &z);
    enc_sizes(&dims->semantic, &k[1], piece, &z);
    int64_t frames = p->max_samples > 0 ? (p->max_samples + dims->hop - 1) / dims->hop : 0;
    const choir_vibevoice_lm_dims *L = &dims->lm;
    int64_t Pc = p->prefill_chunk > 0 ? p->prefill_chunk : VV_DEFAULT_PREFILL;
    int64_t ctx = p->max_context > 0 ? p->max_context : 1;
    int64_t H = L->hidden, qd = (int64_t)L->n_heads * L->head_dim, kvd = (int64_t)L->n_kv_heads * L->head_dim;
    if (scratch) {
        int64_t need = max64(enc_scratch(&dims->acoustic, &k[0], piece), enc_scratch(&dims->semantic, &k[1], piece));
        int64_t I = L->intermediate, V = max64(dims->acoustic.vae_dim, dims->semantic.vae_dim);
        int64_t lm[][2] = {{H, V}, {H, H}, {qd, H}, {kvd, H}, {H, qd}, {I, H}, {H, I}, {L->vocab, H}};
        for (size_t i = 0; i < sizeof lm / sizeof lm[0]; i++)
            need = max64(need, lin_scratch(i == 7 ? 1 : Pc, lm[i][0], lm[i][1]));
        /* The split-keys attention of a step (and of prefill chunks of up to
         * 16 rows) on a device: partial sums of every split of the context. */
        int64_t att_rows = Pc <= 16 ? Pc : 1, splits = (ctx + 127) / 128;
        need = max64(need, att_rows * L->n_heads * splits * (L->head_dim + 2) * (int64_t)sizeof(float));
        /* The tensor-core prefill attention over an f32 cache
         * (choir_cuda_vv_prefill_flash): the visible keys and values
         * rounded to bf16, each half aligned to 256 bytes. */
        if (Pc > 16) need = max64(need, 2 * ((ctx * kvd * 2 + 255) & ~(int64_t)255));
        /* q, k and v as one product (choir_cuda_prefill_fused): its f32 rows
         * before the split. */
        if (Pc > 16) need = max64(need, Pc * (qd + 2 * kvd) * (int64_t)sizeof(float));
        *scratch = need;
    }
    struct {
        float **dst;
        int64_t n;
    } parts[] = {
        {s ? &s->e_in : NULL, z.in}, {s ? &s->e_x : NULL, z.x}, {s ? &s->e_tmp : NULL, z.tmp},
        {s ? &s->e_norm : NULL, z.norm}, {s ? &s->e_tile : NULL, z.tile}, {s ? &s->e_cache : NULL, z.cache},
        {s ? &s->lat[0] : NULL, frames * dims->acoustic.vae_dim},
        {s ? &s->lat[1] : NULL, frames * dims->semantic.vae_dim},
        {s ? &s->x : NULL, Pc * H}, {s ? &s->xn : NULL, Pc * H},
        {s ? &s->tmp : NULL, Pc * H}, {s ? &s->ca : NULL, Pc * H},
        {s ? &s->cb : NULL, Pc * H}, {s ? &s->q : NULL, Pc * qd}, {s ? &s->att : NULL, Pc * qd},
        {s ? &s->gate : NULL, Pc * L->intermediate}, {s ? &s->up : NULL, Pc * L->intermediate},
        {s ? &s->logits : NULL, L->vocab},
        {s ? (float **)&s->ids : NULL, Pc}, {s ? (float **)&s->pos : NULL, Pc},
        {s ? (float **)&s->zeros : NULL, Pc}, {s ? (float **)&s->slots : NULL, Pc},
        {s ? (float **)&s->table : NULL, (ctx + CHOIR_VV_PAGE - 1) / CHOIR_VV_PAGE},
        /* A paged state's keys and values are in its pool's pages. */
        {s ? &s->k_cache : NULL, p->kv_paged ? 0 : (int64_t)L->n_layers * ctx * kvd},
        {s ? &s->v_cache : NULL, p->kv_paged ? 0 : (int64_t)L->n_layers * ctx * kvd},
    };
    int64_t off = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (s) *parts[i].dst = (float *)((char *)s->block + off);
        /* Each buffer starts on a 64-byte line. */
        off += (parts[i].n * (int64_t)sizeof(float) + 63) & ~(int64_t)63;
    }
    if (s) {
        s->piece = piece;
        s->max_frames = frames;
        s->prefill_chunk = (int)Pc;
        s->ctx = (int)ctx;
        s->max_pages = (int)((ctx + CHOIR_VV_PAGE - 1) / CHOIR_VV_PAGE);
        s->sizes = z;
    }
    return off;
}

/* The stream's allocations are aligned to 256 bytes; the scratch, carved
 * from the same arena, may need as much again. */
#define VV_ALIGN_SLACK 512

void vv_plan_sizes(const choir_vibevoice_dims *dims, const choir_vibevoice_plan *plan, int64_t *layout_bytes,
                   int64_t *scratch_bytes) {
    vv_kernels k[2];
    vv_kernels_default(&dims->acoustic, &k[0]);
    vv_kernels_default(&dims->semantic, &k[1]);
    *layout_bytes = layout(dims, k, plan, NULL, scratch_bytes);
}

int64_t choir_vibevoice_plan_bytes(const choir_vibevoice_dims *dims, const choir_vibevoice_plan *plan) {
    int64_t lb, sb;
    vv_plan_sizes(dims, plan, &lb, &sb);
    return lb + sb + VV_ALIGN_SLACK;
}

int64_t choir_vibevoice_plan_scratch_bytes(const choir_vibevoice_dims *dims, const choir_vibevoice_plan *plan) {
    int64_t lb, sb;
    vv_plan_sizes(dims, plan, &lb, &sb);
    return sb;
}

int vv_status(choir_vibevoice_state *s, choir_err *err) { return choir_stream_status(s->stream, err); }

static choir_vibevoice_state *state_on(const choir_vibevoice *m, const choir_vibevoice_plan *plan,
                                       choir_stream *stream, choir_err *err) {
    vv_kernels k[2];
    vv_kernels_of(&m->enc[0], &k[0]);
    vv_kernels_of(&m->enc[1], &k[1]);
    if (plan->max_context > m->dims.lm.max_positions || plan->max_context < 0 || plan->max_samples < 0)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a context of %d tokens (the model has %d positions)",
                             plan->max_context, m->dims.lm.max_positions), NULL;
    if (choir_stream_backend(stream) != m->be)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: the stream is not on the model's backend"), NULL;
    int64_t need = layout(&m->dims, k, plan, NULL, NULL);
    choir_vibevoice_state *s = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *s);
    if (!s) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory"), NULL;
    s->m = m;
    s->plan = *plan;
    s->stream = stream;
    s->host = choir_backend_is_host(m->be);
    /* On a device unless CHOIR_VV_ENC_FUSED=0 (H100: the encoders of 10
     * minutes 1.65 -> 1.20 s; docs/vibevoice.md). The CPU keeps its f32
     * blocks, the oracle of the fused ones. */
    const char *fused = getenv("CHOIR_VV_ENC_FUSED");
    s->enc_fused = !s->host && !(fused && strcmp(fused, "0") == 0);
    if (!(s->block = choir_stream_alloc(stream, (size_t)need, "vibevoice state"))) {
        choir_stream_status(stream, err);
        choir_free(s);
        return NULL;
    }
    layout(&m->dims, k, plan, s, NULL);
    s->kernels[0] = k[0];
    s->kernels[1] = k[1];
    if (plan->kv_paged) s->k_cache = s->v_cache = NULL;
    s->slots_host = choir_calloc(CHOIR_MEM_IO, (size_t)s->prefill_chunk, sizeof *s->slots_host);
    s->table_host = choir_calloc(CHOIR_MEM_IO, (size_t)s->max_pages, sizeof *s->table_host);
    if (!s->slots_host || !s->table_host) {
        choir_vibevoice_state_free(s);
        return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory"), NULL;
    }
    /* slots_host is all zeros until a paged chunk stages its rows. */
    choir_op_upload(stream, s->zeros, s->slots_host, (size_t)s->prefill_chunk * sizeof *s->zeros);
    choir_op_upload(stream, s->table, s->table_host, (size_t)s->max_pages * sizeof *s->table);
    if (s->host) s->logits_host = s->logits;
    else {
        s->logits_host = choir_alloc(CHOIR_MEM_IO, (size_t)m->dims.lm.vocab * sizeof(float));
        s->pos_host = choir_alloc(CHOIR_MEM_IO, (size_t)s->prefill_chunk * sizeof(int32_t));
        if (!s->logits_host || !s->pos_host) {
            choir_vibevoice_state_free(s);
            return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory"), NULL;
        }
    }
    return s;
}

choir_vibevoice_state *choir_vibevoice_state_create_on(const choir_vibevoice *m, const choir_vibevoice_plan *plan,
                                                       choir_stream *stream, choir_err *err) {
    if (plan->kv_paged)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a paged plan takes choir_vibevoice_state_create_paged"),
               NULL;
    return state_on(m, plan, stream, err);
}

/* A state over `mem` or a block of its own stream (paged plans too). */
static choir_vibevoice_state *state_own(const choir_vibevoice *m, const choir_vibevoice_plan *plan, void *mem,
                                        choir_err *err) {
    int64_t lb, sb;
    vv_plan_sizes(&m->dims, plan, &lb, &sb);
    int64_t need = lb + sb + VV_ALIGN_SLACK;
    /* This checkpoint's kernels may be larger than the published ones the
     * plan assumed. */
    vv_kernels k[2];
    vv_kernels_of(&m->enc[0], &k[0]);
    vv_kernels_of(&m->enc[1], &k[1]);
    int64_t own = layout(&m->dims, k, plan, NULL, NULL);
    if (mem && (own > lb || ((uintptr_t)mem & 63)))
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: this checkpoint's kernels need %lld bytes of "
                             "state, more than planned", (long long)(own + sb + VV_ALIGN_SLACK)), NULL;
    if (mem && !choir_backend_is_host(m->be))
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: host memory for a state on %s",
                             choir_backend_name(m->be)), NULL;
    choir_stream *st = choir_stream_create(m->be, err);
    if (!st) return NULL;
    choir_arena *over = NULL;
    int rc;
    if (mem) {
        if (!(over = choir_arena_create_over(mem, (size_t)need, err))) rc = err ? err->code : CHOIR_ENOMEM;
        else rc = choir_stream_use_arena(st, over, (size_t)sb, err);
    } else {
        rc = choir_stream_reserve(st, (size_t)(max64(own, lb) + VV_ALIGN_SLACK), (size_t)sb, err);
    }
    choir_vibevoice_state *s = rc ? NULL : state_on(m, plan, st, err);
    if (!s) {
        choir_stream_free(st);
        choir_arena_free(over);
        return NULL;
    }
    s->owns_stream = 1;
    s->over = over;
    return s;
}

choir_vibevoice_state *choir_vibevoice_state_create(const choir_vibevoice *m, const choir_vibevoice_plan *plan,
                                                    void *mem, choir_err *err) {
    if (plan->kv_paged)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a paged plan takes choir_vibevoice_state_create_paged"),
               NULL;
    return state_own(m, plan, mem, err);
}

choir_vibevoice_state *choir_vibevoice_state_create_paged(const choir_vibevoice *m, const choir_vibevoice_plan *plan,
                                                          choir_vibevoice_kv_pool *pool, choir_err *err) {
    if (!pool || pool->m != m)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: a KV pool of another model"), NULL;
    choir_vibevoice_plan p = *plan;
    p.kv_paged = 1;
    int pages = choir_vibevoice_kv_pages_for(p.max_context > 0 ? p.max_context : 1);
    if (vv_paged_reserve(pool, pages, err)) return NULL;
    choir_vibevoice_state *s = state_own(m, &p, NULL, err);
    if (!s) {
        pool->reserved -= pages;
        return NULL;
    }
    s->pool = pool;
    return s;
}

void choir_vibevoice_state_free(choir_vibevoice_state *s) {
    if (!s) return;
    if (s->pool) vv_paged_release(s);
    choir_free(s->slots_host);
    choir_free(s->table_host);
    choir_graph_free(s->step_graph);
    if (!s->host) {
        choir_free(s->logits_host);
        choir_free(s->pos_host);
    }
    if (s->owns_stream) {
        choir_stream_free(s->stream);
        choir_arena_free(s->over);
    }
    choir_free(s);
}

void choir_vibevoice_reset(choir_vibevoice_state *s) {
    s->n_past = 0;
    s->audio_used = 0;
}

int choir_vibevoice_set_prefill_chunk(choir_vibevoice_state *s, int chunk) {
    int planned = s->plan.prefill_chunk > 0 ? s->plan.prefill_chunk : VV_DEFAULT_PREFILL;
    if (chunk < 1 || chunk > planned) return CHOIR_EINVAL;
    s->prefill_chunk = chunk;
    return 0;
}

int choir_vibevoice_seq_len(const choir_vibevoice_state *s) { return s->n_past; }
float *choir_vibevoice_logits(choir_vibevoice_state *s) { return s->logits_host; }
