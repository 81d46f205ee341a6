/* Whisper's per-step logit filters, in openai/whisper's order: suppress blank,
 * suppress tokens, timestamp rules (../shared/specs/whisper.md §6.3). */
#include <math.h>
#include <string.h>

#include "models/whisper/whisper_internal.h"

/* openai's non_speech_tokens: symbols and brackets that never belong in a
 * transcript, as token ids of each vocabulary (the spec lists how they are
 * derived from the tokenizer; fixing them here keeps decoding independent of
 * the tokenizer files). */
static const int32_t NON_SPEECH_MULTI[] = {
    1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,    29,    31,
    58,    59,    60,    61,    62,    63,    90,    91,    92,    93,    359,   503,   522,
    542,   873,   893,   902,   918,   922,   931,   1350,  1853,  1982,  2460,  2627,  3246,
    3253,  3268,  3536,  3846,  3961,  4183,  4667,  6585,  6647,  7273,  9061,  9383,  10428,
    10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604, 18362,
    18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470, 36865,
    42863, 47425, 49870, 50254};

static const int32_t NON_SPEECH_GPT2[] = {
    1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,    29,    31,
    58,    59,    60,    61,    62,    63,    90,    91,    92,    93,    357,   366,   438,
    532,   685,   705,   796,   930,   1058,  1220,  1267,  1279,  1303,  1343,  1377,  1391,
    1635,  1782,  1875,  2162,  2361,  2488,  3467,  4008,  4211,  4600,  4808,  5299,  5855,
    6329,  7203,  9609,  9959,  10563, 10786, 11420, 11709, 11907, 13163, 13697, 13700, 14808,
    15306, 16410, 16791, 17992, 19203, 19510, 20724, 22305, 22935, 27007, 30109, 30420, 33409,
    34949, 40283, 40493, 40549, 47282, 49146};

int choir_whisper_default_suppress(const choir_whisper_specials *sp, int32_t *out, int cap) {
    const int32_t *ns = sp->multilingual ? NON_SPEECH_MULTI : NON_SPEECH_GPT2;
    int nn = sp->multilingual ? (int)(sizeof NON_SPEECH_MULTI / sizeof NON_SPEECH_MULTI[0])
                              : (int)(sizeof NON_SPEECH_GPT2 / sizeof NON_SPEECH_GPT2[0]);
    int32_t specials[6] = {sp->transcribe, sp->translate, sp->sot, sp->sot_prev, sp->sot_lm,
                           sp->no_speech};
    int n = 0;
    for (int i = 0; i < nn + 6; i++) {
        if (n < cap) out[n] = i < nn ? ns[i] : specials[i - nn];
        n++;
    }
    return n;
}

static void mask_range(float *logits, int from, int to) {
    for (int i = from < 0 ? 0 : from; i < to; i++) logits[i] = -INFINITY;
}

/* The filters up to the timestamp mass rule: suppression and the timestamp
 * masks, which need no look at the logits' values. */
void wf_masks(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens, float *logits) {
    const choir_whisper_specials *sp = f->sp;
    int V = f->n_vocab, tb = sp->timestamp_begin;
    bool at_begin = n_tokens == f->sample_begin;
    if (f->suppress_blank && at_begin) {
        logits[220] = -INFINITY; /* encode(" ") */
        logits[sp->eot] = -INFINITY;
    }
    for (int i = 0; i < f->n_suppress; i++)
        if (f->suppress[i] >= 0 && f->suppress[i] < V) logits[f->suppress[i]] = -INFINITY;
    if (!f->timestamps) return;

    logits[sp->no_timestamps] = -INFINITY;
    const int32_t *seq = tokens + f->sample_begin;
    int n = n_tokens - f->sample_begin;
    bool last_ts = n >= 1 && seq[n - 1] >= tb;
    bool penult_ts = n < 2 || seq[n - 2] >= tb;
    if (last_ts) {
        if (penult_ts) mask_range(logits, tb, V);      /* a pair closed: text next */
        else mask_range(logits, 0, sp->eot);          /* an end timestamp or eot next */
    }
    int32_t t_last = -1;
    for (int i = n - 1; i >= 0; i--)
        if (seq[i] >= tb) {
            t_last = seq[i];
            break;
        }
    if (t_last >= 0) {
        /* Timestamps never decrease, and a segment has non-zero length. */
        int upto = (last_ts && !penult_ts) ? t_last : t_last + 1;
        mask_range(logits, tb, upto);
    }
    if (at_begin) {
        mask_range(logits, 0, tb);
        if (f->max_initial_timestamp_index >= 0) mask_range(logits, tb + f->max_initial_timestamp_index + 1, V);
    }
}

void choir_whisper_filter_logits(const choir_whisper_filter *f, const int32_t *tokens,
                                 int n_tokens, float *logits) {
    int V = f->n_vocab, tb = f->sp->timestamp_begin;
    wf_masks(f, tokens, n_tokens, logits);
    if (!f->timestamps) return;
    /* If the timestamps together are likelier than any single text token, the
     * next token must be a timestamp. Compared in log-softmax space. */
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
    if (mx == -INFINITY) return;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    float ts_max = -INFINITY, text_max = -INFINITY;
    for (int i = tb; i < V; i++) ts_max = fmaxf(ts_max, logits[i]);
    for (int i = 0; i < tb; i++) text_max = fmaxf(text_max, logits[i]);
    if (ts_max == -INFINITY) return;
    double ts_sum = 0;
    for (int i = tb; i < V; i++) ts_sum += exp((double)logits[i] - ts_max);
    double ts_logprob = ts_max + log(ts_sum) - lse;
    double text_logprob = (double)text_max - lse;
    if (ts_logprob > text_logprob) mask_range(logits, 0, tb);
}
