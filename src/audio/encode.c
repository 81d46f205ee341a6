/* Streaming encoders: WAV (16-bit, float), raw s16le, FLAC (libsndfile),
 * MP3 (LAME), Opus in Ogg (libopusenc) and AAC in ADTS (libavcodec,
 * encode_aac.c), all writing through a callback.
 *
 * Input is converted and encoded in blocks of ENCODE_BLOCK_FRAMES, so the
 * scratch an encoder holds does not grow with the length of a _write call. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <lame/lame.h>
#include <opusenc.h>
#include <sndfile.h>

#include "audio/encode_aac.h"
#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/encode.h"

#define ENCODE_BLOCK_FRAMES 4096
#define WAV_HEADER_BYTES 44
#define MP3_BUF_BYTES (ENCODE_BLOCK_FRAMES * 5 / 4 + 7200)

struct choir_encoder {
    choir_audio_format format;
    int rate, channels;
    choir_write_fn write;
    void *user;
    FILE *file;            /* set when writing to a file (then write = file_write) */
    int started, finished, failed, sink_failed;
    int64_t frames;        /* frames taken in */
    int16_t *pcm16;        /* [ENCODE_BLOCK_FRAMES * channels] conversion scratch */
    /* MP3 */
    lame_global_flags *lame;
    unsigned char *mp3buf; /* [MP3_BUF_BYTES] */
    /* Opus */
    OggOpusEnc *opus;
    OggOpusComments *comments;
    /* AAC */
    choir_aac *aac;
    /* FLAC: libsndfile writes to a forward-only virtual file (see flac_*). */
    SNDFILE *sf;
    sf_count_t vpos, vemitted;
};

static const char *const format_names[CHOIR_FORMAT_COUNT] = {"wav", "wav_f32", "pcm", "flac",
                                                             "mp3", "opus",    "aac"};
static const char *const format_mimes[CHOIR_FORMAT_COUNT] = {"audio/wav",  "audio/wav", "audio/L16", "audio/flac",
                                                             "audio/mpeg", "audio/ogg", "audio/aac"};

int choir_audio_format_parse(const char *name, choir_audio_format *format, choir_err *err) {
    if (!name || !format) return choir_err_set(err, CHOIR_EINVAL, "audio format: no name given");
    for (int i = 0; i < CHOIR_FORMAT_COUNT; i++)
        if (strcmp(name, format_names[i]) == 0) {
            *format = (choir_audio_format)i;
            return CHOIR_OK;
        }
    if (strcmp(name, "wavf32") == 0) {
        *format = CHOIR_FORMAT_WAVF32;
        return CHOIR_OK;
    }
    return choir_err_set(err, CHOIR_EINVAL, "unknown audio format '%s' (wav, wav_f32, pcm, flac, mp3, opus, aac)", name);
}

const char *choir_audio_format_name(choir_audio_format format) {
    return (unsigned)format < CHOIR_FORMAT_COUNT ? format_names[format] : "unknown";
}

const char *choir_audio_format_mime(choir_audio_format format) {
    return (unsigned)format < CHOIR_FORMAT_COUNT ? format_mimes[format] : "application/octet-stream";
}

static int emit(choir_encoder *e, const void *data, size_t len) {
    if (len == 0 || e->sink_failed) return e->sink_failed ? -1 : 0;
    if (e->write(data, len, e->user) != 0) {
        e->sink_failed = 1;
        return -1;
    }
    return 0;
}

static void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put_le16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

/* A 44-byte canonical header; data_bytes UINT32_MAX means "unknown length". */
static void wav_header(unsigned char *h, int is_float, int rate, int channels, uint32_t data_bytes) {
    int bytes_per_sample = is_float ? 4 : 2;
    memcpy(h, "RIFF", 4);
    put_le32(h + 4, data_bytes == UINT32_MAX ? UINT32_MAX : data_bytes + WAV_HEADER_BYTES - 8);
    memcpy(h + 8, "WAVEfmt ", 8);
    put_le32(h + 16, 16);
    put_le16(h + 20, is_float ? 3 : 1);
    put_le16(h + 22, (uint16_t)channels);
    put_le32(h + 24, (uint32_t)rate);
    put_le32(h + 28, (uint32_t)(rate * channels * bytes_per_sample));
    put_le16(h + 32, (uint16_t)(channels * bytes_per_sample));
    put_le16(h + 34, (uint16_t)(bytes_per_sample * 8));
    memcpy(h + 36, "data", 4);
    put_le32(h + 40, data_bytes);
}

/* Float to s16 with the same scale the decoder divides by (32768), so a
 * decoded 16-bit file re-encodes to the same bytes. */
static void to_s16(const float *x, size_t n, int16_t *out) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * 32768.0f;
        v = v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v;
        out[i] = (int16_t)lrintf(v);
    }
}

static void s16_to_le(int16_t *s, size_t n) {
    /* choir targets little-endian hosts; this keeps the bytes right elsewhere. */
    for (size_t i = 0; i < n; i++) {
        uint16_t u = (uint16_t)s[i];
        unsigned char b[2] = {(unsigned char)u, (unsigned char)(u >> 8)};
        memcpy(&s[i], b, 2);
    }
}

/* ---- FLAC through libsndfile on a forward-only virtual file ----
 * Bytes written at the current end go to the sink. When libFLAC seeks back at
 * the end to fill in STREAMINFO's totals, those rewrites are dropped: the
 * stream already sent says "unknown", which is valid FLAC. */

static sf_count_t flac_len(void *user) { return ((choir_encoder *)user)->vemitted; }

static sf_count_t flac_seek(sf_count_t offset, int whence, void *user) {
    choir_encoder *e = user;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? e->vpos : e->vemitted;
    if (base + offset < 0) return -1;
    e->vpos = base + offset;
    return e->vpos;
}

static sf_count_t flac_read(void *ptr, sf_count_t count, void *user) {
    (void)ptr;
    (void)count;
    (void)user;
    return 0;
}

static sf_count_t flac_write(const void *ptr, sf_count_t count, void *user) {
    choir_encoder *e = user;
    if (e->vpos == e->vemitted) {
        if (emit(e, ptr, (size_t)count)) return 0;
        e->vemitted += count;
    } else if (e->vpos > e->vemitted) {
        return 0; /* a gap cannot be streamed; libsndfile never makes one */
    }
    e->vpos += count;
    return count;
}

static sf_count_t flac_tell(void *user) { return ((choir_encoder *)user)->vpos; }

/* ---- Opus callbacks ---- */

static int opus_write_cb(void *user, const unsigned char *ptr, opus_int32 len) {
    return emit(user, ptr, (size_t)len) ? 1 : 0;
}

static int opus_close_cb(void *user) {
    (void)user;
    return 0;
}

static int aac_sink(const void *data, size_t len, void *user) {
    return emit(user, data, len) ? 1 : 0;
}

static int file_write(const void *data, size_t len, void *user) {
    return fwrite(data, 1, len, (FILE *)user) == len ? 0 : -1;
}

static int setup_codec(choir_encoder *e, choir_err *err) {
    switch (e->format) {
    case CHOIR_FORMAT_MP3: {
        static const int mp3_rates[] = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000};
        int ok = 0;
        for (size_t i = 0; i < sizeof mp3_rates / sizeof mp3_rates[0]; i++) ok |= mp3_rates[i] == e->rate;
        if (!ok || e->channels > 2)
            return choir_err_set(err, CHOIR_EUNSUPPORTED, "mp3: %d Hz x %d channels is not encodable "
                                 "(8000..48000 Hz MPEG rates, 1 or 2 channels)", e->rate, e->channels);
        e->lame = lame_init();
        e->mp3buf = choir_alloc(CHOIR_MEM_IO, MP3_BUF_BYTES);
        if (!e->lame || !e->mp3buf) return choir_err_set(err, CHOIR_ENOMEM, "mp3: out of memory");
        lame_set_in_samplerate(e->lame, e->rate);
        lame_set_out_samplerate(e->lame, e->rate);
        lame_set_num_channels(e->lame, e->channels);
        lame_set_mode(e->lame, e->channels == 1 ? MONO : JOINT_STEREO);
        /* 64 kbit/s per channel suits speech; MPEG-2 rates (< 32 kHz) top out at 160. */
        int kbps = 64 * e->channels;
        if (e->rate < 32000 && kbps > 160) kbps = 160;
        lame_set_brate(e->lame, kbps);
        lame_set_quality(e->lame, 3);
        /* A Xing/LAME tag needs a seek back at the end, which a stream cannot do. */
        lame_set_bWriteVbrTag(e->lame, 0);
        if (lame_init_params(e->lame) < 0)
            return choir_err_set(err, CHOIR_EINTERNAL, "mp3: LAME rejected its parameters");
        return CHOIR_OK;
    }
    case CHOIR_FORMAT_OPUS: {
        if (e->channels > 8)
            return choir_err_set(err, CHOIR_EUNSUPPORTED, "opus: at most 8 channels (got %d)", e->channels);
        int oerr = 0;
        e->comments = ope_comments_create();
        if (!e->comments) return choir_err_set(err, CHOIR_ENOMEM, "opus: out of memory");
        ope_comments_add(e->comments, "ENCODER", "choir");
        OpusEncCallbacks cb = {opus_write_cb, opus_close_cb};
        int family = e->channels > 2 ? 1 : 0; /* 1: Vorbis channel order, up to 8 */
        e->opus = ope_encoder_create_callbacks(&cb, e, e->comments, e->rate, e->channels, family, &oerr);
        if (!e->opus)
            return choir_err_set(err, CHOIR_EINTERNAL, "opus: encoder set-up failed: %s", ope_strerror(oerr));
        /* A fixed stream serial number (libopusenc draws a random one) makes
         * the output a pure function of the input, so it can be cached and tested. */
        ope_encoder_ctl(e->opus, OPE_SET_SERIALNO(0x63686f72));
        /* Hand pages out within ~100 ms so a streamed response starts early. */
        ope_encoder_ctl(e->opus, OPE_SET_MUXING_DELAY(4800));
        return CHOIR_OK;
    }
    case CHOIR_FORMAT_AAC: {
        choir_err local = {0};
        e->aac = choir_aac_create(e->rate, e->channels, aac_sink, e, err ? err : &local);
        return e->aac ? CHOIR_OK : err ? err->code : local.code;
    }
    case CHOIR_FORMAT_FLAC: {
        if (e->channels > 8)
            return choir_err_set(err, CHOIR_EUNSUPPORTED, "flac: at most 8 channels (got %d)", e->channels);
        SF_INFO info = {.samplerate = e->rate, .channels = e->channels, .format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16};
        SF_VIRTUAL_IO vio = {flac_len, flac_seek, flac_read, flac_write, flac_tell};
        e->sf = sf_open_virtual(&vio, SFM_WRITE, &info, e);
        if (!e->sf) return choir_err_set(err, CHOIR_EINTERNAL, "flac: encoder set-up failed: %s", sf_strerror(NULL));
        return CHOIR_OK;
    }
    default: return CHOIR_OK;
    }
}

choir_encoder *choir_encoder_create(choir_audio_format format, int rate, int channels, choir_write_fn write,
                                    void *user, choir_err *err) {
    if ((unsigned)format >= CHOIR_FORMAT_COUNT || !write || rate < 1000 || rate > 768000 || channels < 1 ||
        channels > 64) {
        choir_err_set(err, CHOIR_EINVAL, "encoder: bad format %d, rate %d Hz or channel count %d", (int)format, rate,
                      channels);
        return NULL;
    }
    choir_encoder *e = choir_calloc(CHOIR_MEM_IO, 1, sizeof *e);
    if (!e) goto nomem;
    e->format = format;
    e->rate = rate;
    e->channels = channels;
    e->write = write;
    e->user = user;
    e->pcm16 = choir_alloc(CHOIR_MEM_IO, (size_t)ENCODE_BLOCK_FRAMES * (size_t)channels * sizeof(int16_t));
    if (!e->pcm16) goto nomem;
    if (setup_codec(e, err)) goto fail;
    return e;
nomem:
    choir_err_set(err, CHOIR_ENOMEM, "encoder: out of memory");
fail:
    choir_encoder_free(e);
    return NULL;
}

choir_encoder *choir_encoder_create_file(choir_audio_format format, int rate, int channels, const char *path,
                                         choir_err *err) {
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "encoder: path is NULL");
        return NULL;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        choir_err_set(err, CHOIR_EIO, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    choir_encoder *e = choir_encoder_create(format, rate, channels, file_write, f, err);
    if (!e) {
        fclose(f);
        return NULL;
    }
    e->file = f;
    return e;
}

void choir_encoder_free(choir_encoder *e) {
    if (!e) return;
    if (e->sf) sf_close(e->sf);
    if (e->opus) ope_encoder_destroy(e->opus);
    choir_aac_free(e->aac);
    if (e->comments) ope_comments_destroy(e->comments);
    if (e->lame) lame_close(e->lame);
    if (e->file) fclose(e->file);
    choir_free(e->mp3buf);
    choir_free(e->pcm16);
    choir_free(e);
}

static int sink_error(choir_encoder *e, choir_err *err) {
    e->failed = 1;
    return choir_err_set(err, CHOIR_EIO, "%s encoder: the output refused the data (client gone or disk full)",
                         choir_audio_format_name(e->format));
}

static int start(choir_encoder *e) {
    if (e->started) return 0;
    e->started = 1;
    if (e->format == CHOIR_FORMAT_WAV16 || e->format == CHOIR_FORMAT_WAVF32) {
        unsigned char h[WAV_HEADER_BYTES];
        wav_header(h, e->format == CHOIR_FORMAT_WAVF32, e->rate, e->channels, UINT32_MAX);
        return emit(e, h, sizeof h);
    }
    return 0;
}

static int encode_block(choir_encoder *e, const float *x, int frames, choir_err *err) {
    size_t n = (size_t)frames * (size_t)e->channels;
    switch (e->format) {
    case CHOIR_FORMAT_WAVF32:
        /* IEEE float, little-endian on every host choir targets. */
        return emit(e, x, n * sizeof(float)) ? sink_error(e, err) : 0;
    case CHOIR_FORMAT_WAV16:
    case CHOIR_FORMAT_PCM16:
        to_s16(x, n, e->pcm16);
        s16_to_le(e->pcm16, n);
        return emit(e, e->pcm16, n * sizeof(int16_t)) ? sink_error(e, err) : 0;
    case CHOIR_FORMAT_FLAC:
        to_s16(x, n, e->pcm16);
        if (sf_writef_short(e->sf, e->pcm16, frames) != frames || e->sink_failed) {
            if (e->sink_failed) return sink_error(e, err);
            e->failed = 1;
            return choir_err_set(err, CHOIR_EINTERNAL, "flac: encoding failed: %s", sf_strerror(e->sf));
        }
        return 0;
    case CHOIR_FORMAT_MP3: {
        int bytes = e->channels == 1
                        ? lame_encode_buffer_ieee_float(e->lame, x, x, frames, e->mp3buf, MP3_BUF_BYTES)
                        : lame_encode_buffer_interleaved_ieee_float(e->lame, x, frames, e->mp3buf, MP3_BUF_BYTES);
        if (bytes < 0) {
            e->failed = 1;
            return choir_err_set(err, CHOIR_EINTERNAL, "mp3: LAME failed (%d)", bytes);
        }
        return emit(e, e->mp3buf, (size_t)bytes) ? sink_error(e, err) : 0;
    }
    case CHOIR_FORMAT_AAC: {
        int rc = choir_aac_write(e->aac, x, frames, err);
        if (e->sink_failed) return sink_error(e, err);
        if (rc) e->failed = 1;
        return rc;
    }
    case CHOIR_FORMAT_OPUS: {
        int rc = ope_encoder_write_float(e->opus, x, frames);
        if (e->sink_failed) return sink_error(e, err);
        if (rc != OPE_OK) {
            e->failed = 1;
            return choir_err_set(err, CHOIR_EINTERNAL, "opus: encoding failed: %s", ope_strerror(rc));
        }
        return 0;
    }
    default: return choir_err_set(err, CHOIR_EINTERNAL, "encoder: unknown format");
    }
}

int choir_encoder_write(choir_encoder *e, const float *interleaved, int64_t frames, choir_err *err) {
    if (!e || frames < 0 || (frames > 0 && !interleaved))
        return choir_err_set(err, CHOIR_EINVAL, "encoder: bad arguments");
    if (e->failed) return choir_err_set(err, CHOIR_EINVAL, "encoder: used after a failure");
    if (e->finished) return choir_err_set(err, CHOIR_EINVAL, "encoder: write after finish");
    if (start(e)) return sink_error(e, err);
    for (int64_t at = 0; at < frames; at += ENCODE_BLOCK_FRAMES) {
        int count = (int)(frames - at < ENCODE_BLOCK_FRAMES ? frames - at : ENCODE_BLOCK_FRAMES);
        int rc = encode_block(e, interleaved + at * e->channels, count, err);
        if (rc) return rc;
    }
    e->frames += frames;
    return CHOIR_OK;
}

/* A file's WAV sizes can be filled in once the length is known. */
static int patch_wav_sizes(choir_encoder *e) {
    int64_t bytes = e->frames * e->channels * (e->format == CHOIR_FORMAT_WAVF32 ? 4 : 2);
    if (bytes > (int64_t)UINT32_MAX - WAV_HEADER_BYTES) return 0; /* stays "unknown" */
    unsigned char b[4];
    if (fflush(e->file) || fseek(e->file, 4, SEEK_SET)) return -1;
    put_le32(b, (uint32_t)(bytes + WAV_HEADER_BYTES - 8));
    if (fwrite(b, 1, 4, e->file) != 4 || fseek(e->file, 40, SEEK_SET)) return -1;
    put_le32(b, (uint32_t)bytes);
    if (fwrite(b, 1, 4, e->file) != 4 || fseek(e->file, 0, SEEK_END)) return -1;
    return 0;
}

int choir_encoder_finish(choir_encoder *e, choir_err *err) {
    if (!e) return choir_err_set(err, CHOIR_EINVAL, "encoder: NULL");
    if (e->failed) return choir_err_set(err, CHOIR_EINVAL, "encoder: used after a failure");
    if (e->finished) return CHOIR_OK;
    e->finished = 1;
    if (start(e)) return sink_error(e, err);
    switch (e->format) {
    case CHOIR_FORMAT_MP3: {
        int bytes = lame_encode_flush(e->lame, e->mp3buf, MP3_BUF_BYTES);
        if (bytes < 0) return choir_err_set(err, CHOIR_EINTERNAL, "mp3: LAME flush failed (%d)", bytes);
        if (emit(e, e->mp3buf, (size_t)bytes)) return sink_error(e, err);
        break;
    }
    case CHOIR_FORMAT_AAC: {
        int rc = choir_aac_finish(e->aac, err);
        if (e->sink_failed) return sink_error(e, err);
        if (rc) return rc;
        break;
    }
    case CHOIR_FORMAT_OPUS: {
        int rc = ope_encoder_drain(e->opus);
        if (e->sink_failed) return sink_error(e, err);
        if (rc != OPE_OK) return choir_err_set(err, CHOIR_EINTERNAL, "opus: drain failed: %s", ope_strerror(rc));
        break;
    }
    case CHOIR_FORMAT_FLAC: {
        int rc = sf_close(e->sf);
        e->sf = NULL;
        if (e->sink_failed) return sink_error(e, err);
        if (rc) return choir_err_set(err, CHOIR_EINTERNAL, "flac: finishing failed: %s", sf_error_number(rc));
        break;
    }
    default: break;
    }
    if (e->file) {
        int rc = 0;
        if (e->format == CHOIR_FORMAT_WAV16 || e->format == CHOIR_FORMAT_WAVF32) rc = patch_wav_sizes(e);
        if (rc || fflush(e->file)) return sink_error(e, err);
    }
    return CHOIR_OK;
}

int choir_audio_encode_file(const char *path, choir_audio_format format, const float *interleaved, int64_t frames,
                            int rate, int channels, choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the create failure's code is read back from it */
    choir_encoder *e = choir_encoder_create_file(format, rate, channels, path, err);
    if (!e) return err->code;
    int rc = choir_encoder_write(e, interleaved, frames, err);
    if (!rc) rc = choir_encoder_finish(e, err);
    choir_encoder_free(e);
    return rc;
}

static int grow_write(const void *data, size_t len, void *user) {
    return choir_buf_append(user, data, len) == CHOIR_OK ? 0 : -1;
}

int choir_audio_encode_memory(choir_audio_format format, const float *interleaved, int64_t frames, int rate,
                              int channels, void **out, size_t *out_len, choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the create failure's code is read back from it */
    if (!out || !out_len) return choir_err_set(err, CHOIR_EINVAL, "encoder: out is NULL");
    *out = NULL;
    *out_len = 0;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    choir_encoder *e = choir_encoder_create(format, rate, channels, grow_write, &b, err);
    if (!e) return err->code;
    int rc = choir_encoder_write(e, interleaved, frames, err);
    if (!rc) rc = choir_encoder_finish(e, err);
    choir_encoder_free(e);
    if (rc) {
        /* The only way this sink refuses is running out of memory. */
        if (rc == CHOIR_EIO) rc = choir_err_set(err, CHOIR_ENOMEM, "encoder: out of memory for the encoded audio");
        choir_buf_free(&b);
        return rc;
    }
    *out = choir_buf_take(&b, out_len);
    if (!*out) return choir_err_set(err, CHOIR_ENOMEM, "encoder: out of memory for the encoded audio");
    return CHOIR_OK;
}
