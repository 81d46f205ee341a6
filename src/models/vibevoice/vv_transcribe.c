/* Transcription: audio to segments. Front end, encoders, the prompt, prefill
 * and greedy decoding to <|endoftext|> / <|im_end|> or max_new_tokens, with
 * a repetition-loop guard; the text inside the model's "Content" strings is
 * streamed out as it is decoded, and the finished output is parsed into
 * segments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/tokenizer.h"
#include "models/vibevoice/vv_state.h"

void choir_vibevoice_default_opts(choir_vibevoice_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_audio_s = 3660.0;
    o->loop_min_tokens = 64;
    o->loop_min_repeats = 3;
    o->loop_max_period = 256;
}

static int64_t samples_24k(int64_t n, int rate) {
    if (rate <= 0 || rate == CHOIR_VIBEVOICE_SAMPLE_RATE) return n;
    return (int64_t)llround((double)n * CHOIR_VIBEVOICE_SAMPLE_RATE / rate);
}

static int max_new_of(const choir_vibevoice_opts *o, double seconds) {
    if (o && o->max_new_tokens > 0) return o->max_new_tokens;
    double t = 256.0 + 20.0 * seconds;
    return t > 32768 ? 32768 : (int)t;
}

/* The plan of a request: its prompt is bounded without tokenizing it (the
 * fixed template is under 64 tokens, the context at most a token per byte). */
static void request_plan(const choir_vibevoice_dims *d, int64_t n24, const choir_vibevoice_opts *o,
                         choir_vibevoice_plan *p) {
    int64_t np = choir_vibevoice_padded_len(n24, d->hop);
    size_t cl = o && o->context ? strlen(o->context) : 0;
    int64_t ctx = np / d->hop + 64 + (int64_t)cl + max_new_of(o, (double)n24 / CHOIR_VIBEVOICE_SAMPLE_RATE) + 1;
    memset(p, 0, sizeof *p);
    p->max_samples = np;
    p->max_context = (int)(ctx < INT32_MAX ? ctx : INT32_MAX);
    p->prefill_chunk = o ? o->prefill_chunk : 0;
}

void choir_vibevoice_transcribe_plan(const choir_vibevoice_dims *d, int64_t n, int rate, const choir_vibevoice_opts *o,
                                     choir_vibevoice_plan *p) {
    request_plan(d, samples_24k(n, rate), o, p);
}

int64_t choir_vibevoice_transcribe_state_bytes(const choir_vibevoice_dims *d, int64_t n, int rate,
                                               const choir_vibevoice_opts *o, int64_t *scratch) {
    choir_vibevoice_plan p;
    request_plan(d, samples_24k(n, rate), o, &p);
    if (scratch) *scratch = choir_vibevoice_plan_scratch_bytes(d, &p);
    return choir_vibevoice_plan_bytes(d, &p);
}

int64_t choir_vibevoice_transcribe_bytes(const choir_vibevoice_dims *d, int64_t n, int rate,
                                         const choir_vibevoice_opts *o) {
    choir_vibevoice_plan p;
    int64_t n24 = samples_24k(n, rate);
    request_plan(d, n24, o, &p);
    /* Plus the resampled and normalised audio and the generated tokens. */
    return choir_vibevoice_plan_bytes(d, &p) + (n24 + p.max_samples) * (int64_t)sizeof(float) +
           (int64_t)p.max_context * 16;
}

/* --- streaming the Content strings ---------------------------------------- */

static size_t put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t vv_content_feed(vv_content *c, const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!c->in_str) {
            if (ch == '"') {
                c->in_str = 1;
                c->is_key = !c->expect_value;
                c->key_len = c->is_key ? 0 : c->key_len;
                c->emitting = !c->is_key && c->key_len == 7 && strncasecmp(c->key, "content", 7) == 0;
                if (c->emitting && c->n_emitted++) out[o++] = ' ';
            } else if (ch == ':') c->expect_value = 1;
            else if (ch == ',' || ch == '{' || ch == '}' || ch == '[' || ch == ']') c->expect_value = 0;
            continue;
        }
        if (c->n_hex > 0) {
            /* \uXXXX: n_hex is the position of the digit being read, 1..4. */
            c->hex[c->n_hex - 1] = ch;
            if (c->n_hex < 4) {
                c->n_hex++;
                continue;
            }
            c->n_hex = 0;
            char hx[5] = {c->hex[0], c->hex[1], c->hex[2], c->hex[3], 0};
            uint32_t cp = (uint32_t)strtoul(hx, NULL, 16);
            if (cp >= 0xD800 && cp < 0xDC00) {
                c->high = cp;
                continue;
            }
            if (cp >= 0xDC00 && cp < 0xE000 && c->high) cp = 0x10000 + ((c->high - 0xD800) << 10) + (cp - 0xDC00);
            else if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
            c->high = 0;
            if (c->emitting) o += put_utf8(cp, out + o);
            continue;
        }
        if (c->esc) {
            c->esc = 0;
            if (ch == 'u') {
                c->n_hex = 1;
                continue;
            }
            char v = ch == 'n' ? '\n' : ch == 't' ? '\t' : ch == 'r' ? '\r' : ch == 'b' ? '\b' : ch == 'f' ? '\f' : ch;
            if (c->emitting) out[o++] = v;
            else if (c->is_key && c->key_len < (int)sizeof c->key) c->key[c->key_len++] = v;
            continue;
        }
        if (ch == '\\') {
            c->esc = 1;
            continue;
        }
        if (ch == '"') {
            c->in_str = 0;
            c->emitting = 0;
            if (!c->is_key) c->key_len = 0;
            c->expect_value = 0;
            continue;
        }
        if (c->emitting) out[o++] = ch;
        else if (c->is_key && c->key_len < (int)sizeof c->key) c->key[c->key_len++] = ch;
    }
    return o;
}

/* --- the repetition guard ------------------------------------------------- */

int vv_loop_check(const int32_t *tok, int n, int *run, int max_period, int min_tokens, int min_repeats) {
    int found = 0;
    for (int p = 1; p <= max_period; p++) {
        run[p - 1] = n > p && tok[n - 1] == tok[n - 1 - p] ? run[p - 1] + 1 : 0;
        if (!found && run[p - 1] + p >= min_tokens && run[p - 1] >= (min_repeats - 1) * p) found = p;
    }
    return found;
}

/* --- the whole request ---------------------------------------------------- */

static char *join_texts(const choir_vibevoice_segment *segs, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(segs[i].text) + 1;
    char *t = choir_alloc(CHOIR_MEM_IO, len);
    if (!t) return NULL;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        const char *s = segs[i].text;
        while (*s == ' ') s++;
        size_t k = strlen(s);
        while (k && s[k - 1] == ' ') k--;
        if (o && k) t[o++] = ' ';
        memcpy(t + o, s, k);
        o += k;
    }
    t[o] = '\0';
    return t;
}

/* A request in phases, so that several can share decoding steps:
 * vv_job_open (resampling, prompt, state), vv_job_prep (normalisation,
 * encoders and prefill, a bounded slice at a time if the caller likes), vv_job_next
 * after each step's logits (the token, the stop rules, streaming),
 * vv_job_finish (text and segments). The state over `mem` (or its own
 * block) when stream is NULL, else carved from `stream`; with `pool`, its
 * own block with its KV cache in the pool's pages. */
int vv_job_open(vv_job *j, const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n,
                int rate, const choir_vibevoice_opts *opts, void *mem, choir_stream *stream,
                choir_vibevoice_kv_pool *pool, choir_err *err) {
    memset(j, 0, sizeof *j);
    if (opts) j->o = *opts;
    else choir_vibevoice_default_opts(&j->o);
    j->m = m;
    j->tok = tok;
    choir_vibevoice_result *res = &j->res;
    const choir_vibevoice_dims *D = &m->dims;
    if (!pcm || n <= 0) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: no audio");
    if (rate <= 0) rate = CHOIR_VIBEVOICE_SAMPLE_RATE;
    double seconds = (double)n / rate;
    if (j->o.max_audio_s > 0 && seconds > j->o.max_audio_s)
        return choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: the audio is %.1f s; this model takes at most %.0f s "
                             "per request", seconds, j->o.max_audio_s);
    int rc = 0;
    float *resampled = NULL;
    const float *a = pcm;
    int64_t n24 = n;
    double t0 = choir_now_s();
    if (rate != CHOIR_VIBEVOICE_SAMPLE_RATE) {
        if ((rc = choir_resample(pcm, n, 1, rate, CHOIR_VIBEVOICE_SAMPLE_RATE, &resampled, &n24, err))) goto done;
        a = resampled;
    }
    choir_vibevoice_plan plan;
    request_plan(D, n24, &j->o, &plan);
    j->max_new = max_new_of(&j->o, (double)n24 / CHOIR_VIBEVOICE_SAMPLE_RATE);
    if (plan.max_context > D->lm.max_positions) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: %.1f s of audio needs a context of %d tokens; the "
                           "model has %d positions", seconds, plan.max_context, D->lm.max_positions);
        goto done;
    }
    j->np = plan.max_samples;
    j->x = choir_alloc(CHOIR_MEM_IO, (size_t)(j->np + 1) * sizeof *j->x);
    j->gen = choir_alloc(CHOIR_MEM_IO, (size_t)(j->max_new + 1) * sizeof *j->gen);
    j->run = choir_calloc(CHOIR_MEM_IO, (size_t)(j->o.loop_max_period > 0 ? j->o.loop_max_period : 1), sizeof *j->run);
    j->ts = choir_tokenizer_stream_create(tok, 0, err);
    if (!j->x || !j->gen || !j->run || !j->ts) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        goto done;
    }
    /* Normalised in pieces by vv_job_prep: an hour is 0.4 s of it. */
    j->src = a;
    j->n_src = n24;
    j->src_owned = resampled;
    resampled = NULL;
    res->duration = (double)n24 / CHOIR_VIBEVOICE_SAMPLE_RATE;
    res->n_audio_tokens = (int)(j->np / D->hop);
    if ((rc = choir_vibevoice_prompt(tok, D, res->n_audio_tokens, res->duration, j->o.context, &j->prompt,
                                     &j->n_prompt, err)))
        goto done;
    res->n_prompt = j->n_prompt;
    if (!(j->s = pool     ? choir_vibevoice_state_create_paged(m, &plan, pool, err)
                 : stream ? choir_vibevoice_state_create_on(m, &plan, stream, err)
                          : choir_vibevoice_state_create(m, &plan, mem, err))) {
        rc = err ? err->code : CHOIR_ENOMEM;
        goto done;
    }
    rc = vv_encode_start(m, j->s, j->np, j->o.chunk_samples, &j->enc, err);
    j->im_end = choir_tokenizer_lookup(tok, "<|im_end|>");
    res->stop = CHOIR_VIBEVOICE_STOP_LENGTH;
    res->t_encode = choir_now_s() - t0;
done:
    choir_free(resampled);
    if (rc) vv_job_clear(j);
    return rc;
}

int vv_job_prep(vv_job *j, double budget_s, choir_err *err) {
    choir_vibevoice_result *res = &j->res;
    double t0 = choir_now_s(), tu = t0;
    int rc = 0;
    while (j->phase < 2) {
        if (j->phase == 0 && j->norm.pass != VV_NORM_DONE) {
            if (!vv_norm_step(&j->norm, j->src, j->n_src, j->m->dims.hop, j->x, VV_NORM_PIECE)) {
                choir_free(j->src_owned);
                j->src_owned = NULL;
                j->src = NULL;
            }
        } else if (j->phase == 0) {
            if (!vv_encode_pass(j->m, j->s, j->x, &j->enc)) {
                /* Waits for the device, so that the encoders' time is theirs. */
                if ((rc = choir_stream_sync(j->s->stream, err))) break;
                choir_free(j->x);
                j->x = NULL;
                j->phase = 1;
                double t = choir_now_s();
                res->t_encode += t - tu;
                tu = t;
            }
        } else {
            rc = vv_prefill_next(j->m, j->s, j->prompt, j->n_prompt, &j->prefilled, err);
            if (rc < 0) break;
            rc = 0;
            if (j->prefilled == j->n_prompt) {
                choir_free(j->prompt);
                j->prompt = NULL;
                j->phase = 2;
                j->t_decode0 = choir_now_s();
                res->t_prefill += j->t_decode0 - tu;
                tu = j->t_decode0;
            }
        }
        if (budget_s > 0 && j->phase < 2) {
            /* The piece is done when its time is read. */
            if ((rc = choir_stream_sync(j->s->stream, err))) break;
            if (choir_now_s() - t0 >= budget_s) break;
        }
    }
    if (rc) {
        vv_job_clear(j);
        return rc;
    }
    double t = choir_now_s();
    if (j->phase == 0) res->t_encode += t - tu;
    else if (j->phase == 1) res->t_prefill += t - tu;
    return j->phase < 2;
}

int vv_job_begin(vv_job *j, const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n,
                 int rate, const choir_vibevoice_opts *opts, void *mem, choir_stream *stream,
                 choir_vibevoice_kv_pool *pool, choir_err *err) {
    int rc = vv_job_open(j, m, tok, pcm, n, rate, opts, mem, stream, pool, err);
    return rc ? rc : vv_job_prep(j, 0, err);
}

int vv_job_next(vv_job *j, choir_err *err) {
    if (j->n_gen >= j->max_new) return 0;
    return vv_job_take(j, (int32_t)choir_argmax_f32(choir_vibevoice_logits(j->s), j->m->dims.lm.vocab), err);
}

int vv_job_take(vv_job *j, int32_t t, choir_err *err) {
    const choir_vibevoice_dims *D = &j->m->dims;
    choir_vibevoice_result *res = &j->res;
    if (j->n_gen >= j->max_new) return 0;
    if (!j->o.ignore_eos && (t == D->eos_token || t == j->im_end)) {
        res->stop = CHOIR_VIBEVOICE_STOP_EOS;
        return 0;
    }
    j->gen[j->n_gen++] = t;
    const char *piece;
    size_t pl;
    int rc = choir_tokenizer_stream_push(j->ts, t, &piece, &pl, err);
    if (rc) return rc;
    if (j->o.on_text) {
        if (4 * pl + 8 > j->cb_cap) {
            choir_free(j->cbuf);
            j->cb_cap = 4 * pl + 64;
            if (!(j->cbuf = choir_alloc(CHOIR_MEM_IO, j->cb_cap)))
                return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        }
        /* Called every token, with or without new text, so that a caller
         * can stop a request between steps. */
        size_t cl = vv_content_feed(&j->cs, piece, pl, j->cbuf);
        j->cbuf[cl] = '\0';
        if (j->o.on_text(j->o.user, j->cbuf, cl)) {
            res->stop = CHOIR_VIBEVOICE_STOP_CANCELLED;
            return 0;
        }
    }
    int period = j->o.loop_max_period > 0 ? vv_loop_check(j->gen, j->n_gen, j->run, j->o.loop_max_period,
                                                          j->o.loop_min_tokens, j->o.loop_min_repeats) : 0;
    if (period) {
        /* Keep the first occurrence of the repeating period. */
        j->n_gen -= j->run[period - 1];
        res->stop = CHOIR_VIBEVOICE_STOP_LOOP;
        res->loop_period = period;
        return 0;
    }
    if (j->n_gen >= j->max_new) return 0;
    j->pending = t;
    return 1;
}

int vv_job_finish(vv_job *j, choir_vibevoice_result *out, choir_err *err) {
    choir_vibevoice_result *res = &j->res;
    res->n_generated = j->n_gen;
    res->t_decode = choir_now_s() - j->t_decode0;
    size_t rl;
    int rc = choir_tokenizer_decode_ex(j->tok, j->gen, j->n_gen, 0, &res->raw, &rl, err);
    if (rc) goto done;
    choir_err perr = {0};
    int ns = choir_vibevoice_parse(res->raw, &res->segments, &perr);
    if (ns == CHOIR_ENOMEM) {
        rc = choir_err_set(err, ns, "vibevoice: out of memory");
        goto done;
    }
    if (ns < 0) {
        /* Not a transcript (untrained weights, a loop from the start): say so
         * and keep what the model wrote, without the role line. */
        res->malformed = 1;
        const char *body = res->raw;
        if (strncmp(body, "assistant\n", 10) == 0) body += 10;
        res->text = choir_strdup(body);
    } else {
        res->n_segments = ns;
        res->text = join_texts(res->segments, ns);
    }
    if (!res->text) rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
done:
    if (rc) choir_vibevoice_result_clear(res);
    *out = *res;
    memset(res, 0, sizeof *res);
    vv_job_clear(j);
    return rc;
}

void vv_job_clear(vv_job *j) {
    choir_free(j->x);
    choir_free(j->src_owned);
    choir_free(j->prompt);
    choir_tokenizer_stream_free(j->ts);
    choir_vibevoice_state_free(j->s);
    choir_free(j->cbuf);
    choir_free(j->run);
    choir_free(j->gen);
    choir_vibevoice_result_clear(&j->res);
    memset(j, 0, sizeof *j);
}

static int transcribe(const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n, int rate,
                      const choir_vibevoice_opts *opts, void *mem, choir_stream *stream, choir_vibevoice_result *res,
                      choir_err *err) {
    vv_job j;
    memset(res, 0, sizeof *res);
    int rc = vv_job_begin(&j, m, tok, pcm, n, rate, opts, mem, stream, NULL, err);
    if (rc) return rc;
    while ((rc = vv_job_next(&j, err)) == 1)
        if ((rc = choir_vibevoice_step(m, j.s, j.pending, NULL, err))) break;
    if (rc) {
        vv_job_clear(&j);
        return rc;
    }
    return vv_job_finish(&j, res, err);
}

int choir_vibevoice_transcribe(const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n,
                               int rate, const choir_vibevoice_opts *o, void *mem, choir_vibevoice_result *res,
                               choir_err *err) {
    return transcribe(m, tok, pcm, n, rate, o, mem, NULL, res, err);
}

int choir_vibevoice_transcribe_on(const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n,
                                  int rate, const choir_vibevoice_opts *o, choir_stream *stream,
                                  choir_vibevoice_result *res, choir_err *err) {
    if (!stream) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: no stream");
    return transcribe(m, tok, pcm, n, rate, o, NULL, stream, res, err);
}

void choir_vibevoice_result_clear(choir_vibevoice_result *r) {
    if (!r) return;
    choir_free(r->raw);
    choir_free(r->text);
    choir_vibevoice_segments_free(r->segments, r->n_segments);
    memset(r, 0, sizeof *r);
}
