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

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The whole request; the state over `mem` (or its own block) when stream is
 * NULL, else carved from `stream`. */
static int transcribe(const choir_vibevoice *m, const choir_tokenizer *tok, const float *pcm, int64_t n, int rate,
                      const choir_vibevoice_opts *opts, void *mem, choir_stream *stream, choir_vibevoice_result *res,
                      choir_err *err) {
    choir_vibevoice_opts o;
    if (opts) o = *opts;
    else choir_vibevoice_default_opts(&o);
    memset(res, 0, sizeof *res);
    const choir_vibevoice_dims *D = &m->dims;
    if (!pcm || n <= 0) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: no audio");
    if (rate <= 0) rate = CHOIR_VIBEVOICE_SAMPLE_RATE;
    double seconds = (double)n / rate;
    if (o.max_audio_s > 0 && seconds > o.max_audio_s)
        return choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: the audio is %.1f s; this model takes at most %.0f s "
                             "per request", seconds, o.max_audio_s);
    int rc = 0;
    float *resampled = NULL, *x = NULL;
    int32_t *prompt = NULL, *gen = NULL;
    int *run = NULL, n_prompt = 0;
    char *cbuf = NULL;
    choir_vibevoice_state *s = NULL;
    choir_tokenizer_stream *ts = NULL;
    const float *a = pcm;
    int64_t n24 = n;
    double t0 = choir_now_s();
    if (rate != CHOIR_VIBEVOICE_SAMPLE_RATE) {
        if ((rc = choir_resample(pcm, n, 1, rate, CHOIR_VIBEVOICE_SAMPLE_RATE, &resampled, &n24, err))) goto done;
        a = resampled;
    }
    choir_vibevoice_plan plan;
    request_plan(D, n24, &o, &plan);
    int max_new = max_new_of(&o, (double)n24 / CHOIR_VIBEVOICE_SAMPLE_RATE);
    if (plan.max_context > D->lm.max_positions) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: %.1f s of audio needs a context of %d tokens; the "
                           "model has %d positions", seconds, plan.max_context, D->lm.max_positions);
        goto done;
    }
    int64_t np = plan.max_samples;
    x = choir_alloc(CHOIR_MEM_IO, (size_t)(np + 1) * sizeof *x);
    gen = choir_alloc(CHOIR_MEM_IO, (size_t)(max_new + 1) * sizeof *gen);
    run = choir_calloc(CHOIR_MEM_IO, (size_t)(o.loop_max_period > 0 ? o.loop_max_period : 1), sizeof *run);
    ts = choir_tokenizer_stream_create(tok, 0, err);
    if (!x || !gen || !run || !ts) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        goto done;
    }
    choir_vibevoice_normalize(a, n24, D->hop, x);
    res->duration = (double)n24 / CHOIR_VIBEVOICE_SAMPLE_RATE;
    res->n_audio_tokens = (int)(np / D->hop);
    if ((rc = choir_vibevoice_prompt(tok, D, res->n_audio_tokens, res->duration, o.context, &prompt, &n_prompt, err)))
        goto done;
    res->n_prompt = n_prompt;
    if (!(s = stream ? choir_vibevoice_state_create_on(m, &plan, stream, err)
                     : choir_vibevoice_state_create(m, &plan, mem, err))) {
        rc = err ? err->code : CHOIR_ENOMEM;
        goto done;
    }
    if ((rc = choir_vibevoice_encode(m, s, x, np, o.chunk_samples, NULL, NULL, err))) goto done;
    double t1 = choir_now_s();
    res->t_encode = t1 - t0;
    if ((rc = choir_vibevoice_prefill(m, s, prompt, n_prompt, NULL, NULL, NULL, err))) goto done;
    double t2 = choir_now_s();
    res->t_prefill = t2 - t1;

    int32_t im_end = choir_tokenizer_lookup(tok, "<|im_end|>");
    float *logits = choir_vibevoice_logits(s);
    vv_content cs = {0};
    size_t cb_cap = 0;
    int n_gen = 0;
    res->stop = CHOIR_VIBEVOICE_STOP_LENGTH;
    while (n_gen < max_new) {
        int32_t t = argmax(logits, D->lm.vocab);
        if (!o.ignore_eos && (t == D->eos_token || t == im_end)) {
            res->stop = CHOIR_VIBEVOICE_STOP_EOS;
            break;
        }
        gen[n_gen++] = t;
        const char *piece;
        size_t pl;
        if ((rc = choir_tokenizer_stream_push(ts, t, &piece, &pl, err))) goto done;
        if (o.on_text) {
            if (4 * pl + 8 > cb_cap) {
                choir_free(cbuf);
                cb_cap = 4 * pl + 64;
                if (!(cbuf = choir_alloc(CHOIR_MEM_IO, cb_cap))) {
                    rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
                    goto done;
                }
            }
            /* Called every token, with or without new text, so that a
             * caller can stop a request between steps. */
            size_t cl = vv_content_feed(&cs, piece, pl, cbuf);
            cbuf[cl] = '\0';
            if (o.on_text(o.user, cbuf, cl)) {
                res->stop = CHOIR_VIBEVOICE_STOP_CANCELLED;
                break;
            }
        }
        int period = o.loop_max_period > 0 ? vv_loop_check(gen, n_gen, run, o.loop_max_period, o.loop_min_tokens,
                                                           o.loop_min_repeats) : 0;
        if (period) {
            /* Keep the first occurrence of the repeating period. */
            n_gen -= run[period - 1];
            res->stop = CHOIR_VIBEVOICE_STOP_LOOP;
            res->loop_period = period;
            break;
        }
        if (n_gen < max_new && (rc = choir_vibevoice_step(m, s, t, NULL, err))) goto done;
    }
    res->n_generated = n_gen;
    res->t_decode = choir_now_s() - t2;
    size_t rl;
    if ((rc = choir_tokenizer_decode_ex(tok, gen, n_gen, 0, &res->raw, &rl, err))) goto done;
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
    choir_tokenizer_stream_free(ts);
    choir_vibevoice_state_free(s);
    choir_free(cbuf);
    choir_free(run);
    choir_free(gen);
    choir_free(prompt);
    choir_free(x);
    choir_free(resampled);
    if (rc) choir_vibevoice_result_clear(res);
    return rc;
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
