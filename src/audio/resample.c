/* Resampling through libsoxr: a one-shot form and a streaming object.
 *
 * The streaming object counts the frames it has taken in and given out, so it
 * can say exactly how much room the next call needs and can stop the flush at
 * round(total_in * ratio) frames: a signal fed in pieces comes out with the
 * same length as the one-shot form gives. */
#include <math.h>
#include <string.h>

#include <soxr.h>

#include "choir/alloc.h"
#include "choir/audio.h"

struct choir_resampler {
    soxr_t soxr;
    int in_rate, out_rate, channels;
    int64_t total_in, total_out;
    int flushed;
};

static int check_rates(int in_rate, int out_rate, int channels, choir_err *err) {
    if (in_rate <= 0 || out_rate <= 0 || in_rate > 1000000 || out_rate > 1000000)
        return choir_err_set(err, CHOIR_EINVAL, "resample: rates must be in 1..1000000 Hz (got %d -> %d)",
                             in_rate, out_rate);
    if (channels <= 0 || channels > 256)
        return choir_err_set(err, CHOIR_EINVAL, "resample: channel count %d out of range 1..256", channels);
    return CHOIR_OK;
}

choir_resampler *choir_resampler_create(int in_rate, int out_rate, int channels, choir_err *err) {
    if (check_rates(in_rate, out_rate, channels, err)) return NULL;
    choir_resampler *r = choir_calloc(CHOIR_MEM_CACHE, 1, sizeof *r);
    if (!r) {
        choir_err_set(err, CHOIR_ENOMEM, "resample: out of memory");
        return NULL;
    }
    r->in_rate = in_rate;
    r->out_rate = out_rate;
    r->channels = channels;
    if (in_rate != out_rate) {
        soxr_error_t e = NULL;
        soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        r->soxr = soxr_create((double)in_rate, (double)out_rate, (unsigned)channels, &e, &io, &q, NULL);
        if (!r->soxr || e) {
            choir_err_set(err, CHOIR_EINTERNAL, "resample: soxr_create(%d -> %d Hz) failed: %s", in_rate,
                          out_rate, e ? e : "unknown");
            goto fail;
        }
    }
    return r;
fail:
    choir_resampler_free(r);
    return NULL;
}

void choir_resampler_free(choir_resampler *r) {
    if (!r) return;
    if (r->soxr) soxr_delete(r->soxr);
    choir_free(r);
}

/* Output frames owed once `total_in` input frames have been seen. */
static int64_t owed_frames(const choir_resampler *r, int64_t total_in) {
    return (int64_t)llround((double)total_in * r->out_rate / r->in_rate);
}

int64_t choir_resampler_max_out(const choir_resampler *r, int64_t in_frames) {
    if (!r) return 0;
    int64_t ceil_total = ((r->total_in + in_frames) * (int64_t)r->out_rate + r->in_rate - 1) / r->in_rate;
    int64_t room = ceil_total - r->total_out + 1;
    return room > 0 ? room : 0;
}

int choir_resampler_process(choir_resampler *r, const float *in, int64_t in_frames, float *out,
                            int64_t out_cap, int64_t *out_frames, choir_err *err) {
    *out_frames = 0;
    if (!r || in_frames < 0 || (in_frames > 0 && !in) || out_cap < 0 || (out_cap > 0 && !out))
        return choir_err_set(err, CHOIR_EINVAL, "resample: bad arguments");
    if (r->flushed) return choir_err_set(err, CHOIR_EINVAL, "resample: fed after flush");
    int64_t produced = 0;
    if (!r->soxr) {
        if (in_frames > out_cap) return choir_err_set(err, CHOIR_EINVAL, "resample: output buffer too small");
        if (in_frames) memcpy(out, in, (size_t)in_frames * (size_t)r->channels * sizeof(float));
        produced = in_frames;
    } else {
        int64_t consumed = 0;
        /* soxr may take only part of the input when the output fills; loop until
         * all of it is in. Output never exceeds what the ratio allows. */
        while (consumed < in_frames) {
            size_t idone = 0, odone = 0;
            soxr_error_t e = soxr_process(r->soxr, in + consumed * r->channels, (size_t)(in_frames - consumed),
                                          &idone, out + produced * r->channels, (size_t)(out_cap - produced),
                                          &odone);
            if (e) return choir_err_set(err, CHOIR_EINTERNAL, "resample: soxr_process failed: %s", e);
            consumed += (int64_t)idone;
            produced += (int64_t)odone;
            if (idone == 0 && odone == 0)
                return choir_err_set(err, CHOIR_EINVAL, "resample: output buffer too small");
        }
    }
    r->total_in += in_frames;
    r->total_out += produced;
    *out_frames = produced;
    return CHOIR_OK;
}

int choir_resampler_flush(choir_resampler *r, float *out, int64_t out_cap, int64_t *out_frames,
                          choir_err *err) {
    *out_frames = 0;
    if (!r || out_cap < 0 || (out_cap > 0 && !out)) return choir_err_set(err, CHOIR_EINVAL, "resample: bad arguments");
    r->flushed = 1;
    int64_t want = owed_frames(r, r->total_in) - r->total_out;
    if (want <= 0 || !r->soxr) return CHOIR_OK;
    if (want > out_cap) want = out_cap;
    int64_t produced = 0;
    while (produced < want) {
        size_t odone = 0;
        soxr_error_t e = soxr_process(r->soxr, NULL, 0, NULL, out + produced * r->channels,
                                      (size_t)(want - produced), &odone);
        if (e) return choir_err_set(err, CHOIR_EINTERNAL, "resample: soxr flush failed: %s", e);
        if (odone == 0) break;
        produced += (int64_t)odone;
    }
    /* soxr ends a hair short for some ratios; the owed tail is silence-padded
     * so the length is exactly round(total_in * ratio). */
    if (produced < want) {
        memset(out + produced * r->channels, 0, (size_t)(want - produced) * (size_t)r->channels * sizeof(float));
        produced = want;
    }
    r->total_out += produced;
    *out_frames = produced;
    return CHOIR_OK;
}

int choir_resample(const float *in, int64_t in_frames, int channels, int in_rate, int out_rate,
                   float **out, int64_t *out_frames, choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the create failure's code is read back from it */
    *out = NULL;
    *out_frames = 0;
    if (in_frames < 0 || (in_frames > 0 && !in)) return choir_err_set(err, CHOIR_EINVAL, "resample: bad input");
    int rc = check_rates(in_rate, out_rate, channels, err);
    if (rc) return rc;
    choir_resampler *r = choir_resampler_create(in_rate, out_rate, channels, err);
    if (!r) return err->code;
    int64_t cap = choir_resampler_max_out(r, in_frames) + 1;
    float *buf = choir_alloc(CHOIR_MEM_IO, (size_t)cap * (size_t)channels * sizeof(float));
    if (!buf) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "resample: out of memory for %lld frames", (long long)cap);
        goto fail;
    }
    int64_t got = 0, tail = 0;
    rc = choir_resampler_process(r, in, in_frames, buf, cap, &got, err);
    if (rc) goto fail;
    rc = choir_resampler_flush(r, buf + got * channels, cap - got, &tail, err);
    if (rc) goto fail;
    choir_resampler_free(r);
    *out = buf;
    *out_frames = got + tail;
    return CHOIR_OK;
fail:
    choir_free(buf);
    choir_resampler_free(r);
    return rc;
}
