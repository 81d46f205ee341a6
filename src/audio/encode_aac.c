/* AAC-LC in ADTS through libavcodec (see encode_aac.h).
 *
 * libavcodec's "aac" encoder takes planar float frames of exactly
 * frame_size (1024) samples and hands back raw AAC access units; each gets the
 * 7-byte ADTS header (ISO/IEC 13818-7, 6.2) written here, which is all an
 * ADTS stream is, so libavformat is not needed. The encoder runs on one
 * thread, so the same input gives the same bytes whatever the pieces. */
#include "audio/encode_aac.h"

#if !defined(CHOIR_HAVE_AAC)
/* Built with -DCHOIR_AAC=OFF: no libavcodec, so AAC is refused up front. */
choir_aac *choir_aac_create(int rate, int channels, choir_write_fn write, void *user, choir_err *err) {
    (void)rate;
    (void)channels;
    (void)write;
    (void)user;
    choir_err_set(err, CHOIR_EUNSUPPORTED,
                  "aac: this build has no AAC encoder (configured with -DCHOIR_AAC=OFF)");
    return NULL;
}
int choir_aac_write(choir_aac *a, const float *x, int64_t frames, choir_err *err) {
    (void)a;
    (void)x;
    (void)frames;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "aac: not in this build");
}
int choir_aac_finish(choir_aac *a, choir_err *err) {
    (void)a;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "aac: not in this build");
}
void choir_aac_free(choir_aac *a) {
    (void)a;
}
#else

#include <pthread.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/channel_layout.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>

struct choir_aac {
    AVCodecContext *ctx;
    AVFrame *frame;    /* one codec frame, planar float, being filled */
    AVPacket *packet;
    int channels, filled, sampling_index;
    choir_write_fn write;
    void *user;
    int sink_failed;
};

/* ADTS's sampling_frequency_index table. */
static const int adts_rates[13] = {96000, 88200, 64000, 48000, 44100, 32000, 24000,
                                   22050, 16000, 12000, 11025, 8000,  7350};

/* libavcodec logs to stderr by itself (statistics at every close); only its
 * errors are worth a server's log. Its level is process-wide, set once. */
static void quiet_libav(void) {
    av_log_set_level(AV_LOG_ERROR);
}

choir_aac *choir_aac_create(int rate, int channels, choir_write_fn write, void *user, choir_err *err) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, quiet_libav);
    int index = -1;
    for (int i = 0; i < 13; i++)
        if (adts_rates[i] == rate) index = i;
    if (index < 0 || channels < 1 || channels > 6) {
        choir_err_set(err, CHOIR_EUNSUPPORTED,
                      "aac: %d Hz x %d channels is not encodable (ADTS rates 7350..96000 Hz, 1..6 channels)", rate,
                      channels);
        return NULL;
    }
    const AVCodec *codec = avcodec_find_encoder_by_name("aac");
    if (!codec) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "aac: this libavcodec has no AAC encoder");
        return NULL;
    }
    choir_aac *a = av_mallocz(sizeof *a);
    if (!a) goto nomem;
    a->channels = channels;
    a->sampling_index = index;
    a->write = write;
    a->user = user;
    a->ctx = avcodec_alloc_context3(codec);
    a->frame = av_frame_alloc();
    a->packet = av_packet_alloc();
    if (!a->ctx || !a->frame || !a->packet) goto nomem;
    a->ctx->sample_fmt = AV_SAMPLE_FMT_FLTP;
    a->ctx->sample_rate = rate;
    av_channel_layout_default(&a->ctx->ch_layout, channels);
    /* 64 kbit/s per channel, as for MP3: plenty for speech */
    a->ctx->bit_rate = 64000 * (int64_t)channels;
    a->ctx->profile = FF_PROFILE_AAC_LOW;
    a->ctx->thread_count = 1;
    int rc = avcodec_open2(a->ctx, codec, NULL);
    if (rc < 0) {
        choir_err_set(err, CHOIR_EINTERNAL, "aac: encoder set-up failed (%d)", rc);
        goto fail;
    }
    a->frame->format = AV_SAMPLE_FMT_FLTP;
    a->frame->nb_samples = a->ctx->frame_size;
    a->frame->sample_rate = rate;
    if (av_channel_layout_copy(&a->frame->ch_layout, &a->ctx->ch_layout) < 0 || av_frame_get_buffer(a->frame, 0) < 0)
        goto nomem;
    return a;
nomem:
    choir_err_set(err, CHOIR_ENOMEM, "aac: out of memory");
fail:
    choir_aac_free(a);
    return NULL;
}

void choir_aac_free(choir_aac *a) {
    if (!a) return;
    avcodec_free_context(&a->ctx);
    av_frame_free(&a->frame);
    av_packet_free(&a->packet);
    av_free(a);
}

/* Writes the ADTS header for a payload of `len` bytes, then the payload. */
static int emit_adts(choir_aac *a, const uint8_t *data, int len) {
    if (a->sink_failed) return -1;
    unsigned frame_len = (unsigned)len + 7;
    unsigned channel_config = a->channels == 6 ? 6 : (unsigned)a->channels;
    uint8_t h[7];
    h[0] = 0xFF;                                   /* syncword 0xFFF */
    h[1] = 0xF1;                                   /* MPEG-4, layer 0, no CRC */
    h[2] = (uint8_t)((1u << 6) |                   /* profile: AAC LC (object type 2, minus 1) */
                     ((unsigned)a->sampling_index << 2) | (channel_config >> 2));
    h[3] = (uint8_t)(((channel_config & 3u) << 6) | (frame_len >> 11));
    h[4] = (uint8_t)((frame_len >> 3) & 0xFF);
    h[5] = (uint8_t)(((frame_len & 7u) << 5) | 0x1F); /* buffer fullness 0x7FF: variable rate */
    h[6] = 0xFC;                                   /* ... and one raw data block per frame */
    if (a->write(h, sizeof h, a->user) != 0 || a->write(data, (size_t)len, a->user) != 0) {
        a->sink_failed = 1;
        return -1;
    }
    return 0;
}

/* Sends one frame (NULL: end of stream) and writes every packet that comes out. */
static int encode(choir_aac *a, AVFrame *frame, choir_err *err) {
    int rc = avcodec_send_frame(a->ctx, frame);
    if (rc < 0) return choir_err_set(err, CHOIR_EINTERNAL, "aac: encoding failed (%d)", rc);
    for (;;) {
        rc = avcodec_receive_packet(a->ctx, a->packet);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return 0;
        if (rc < 0) return choir_err_set(err, CHOIR_EINTERNAL, "aac: encoding failed (%d)", rc);
        int sunk = emit_adts(a, a->packet->data, a->packet->size);
        av_packet_unref(a->packet);
        if (sunk) return choir_err_set(err, CHOIR_EIO, "aac encoder: the output refused the data");
    }
}

static int send_filled(choir_aac *a, choir_err *err) {
    a->frame->pts = AV_NOPTS_VALUE;
    int rc = encode(a, a->frame, err);
    a->filled = 0;
    return rc;
}

int choir_aac_write(choir_aac *a, const float *x, int64_t frames, choir_err *err) {
    int size = a->ctx->frame_size;
    for (int64_t i = 0; i < frames;) {
        /* the encoder may still hold the buffers of the frame sent last */
        if (av_frame_make_writable(a->frame) < 0) return choir_err_set(err, CHOIR_ENOMEM, "aac: out of memory");
        int take = (int)(frames - i < size - a->filled ? frames - i : size - a->filled);
        for (int c = 0; c < a->channels; c++) {
            float *plane = (float *)a->frame->extended_data[c] + a->filled;
            for (int k = 0; k < take; k++) {
                float v = x[(i + k) * a->channels + c];
                plane[k] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
            }
        }
        a->filled += take;
        i += take;
        if (a->filled == size) {
            int rc = send_filled(a, err);
            if (rc) return rc;
        }
    }
    return 0;
}

int choir_aac_finish(choir_aac *a, choir_err *err) {
    if (a->filled > 0) {
        if (av_frame_make_writable(a->frame) < 0) return choir_err_set(err, CHOIR_ENOMEM, "aac: out of memory");
        /* the last frame is padded with silence (a shorter frame is refused) */
        for (int c = 0; c < a->channels; c++)
            memset((float *)a->frame->extended_data[c] + a->filled, 0,
                   (size_t)(a->ctx->frame_size - a->filled) * sizeof(float));
        int rc = send_filled(a, err);
        if (rc) return rc;
    }
    return encode(a, NULL, err);
}

#endif /* CHOIR_HAVE_AAC */
