/* Decoding audio through libsndfile (WAV, FLAC, Ogg Vorbis/Opus, MP3), from a
 * file or from memory, with optional mix-down and resampling.
 *
 * Input is read in blocks and pushed through the mix-down and the streaming
 * resampler block by block, so the only buffer that grows is the output, and
 * the length cap is enforced while reading: an over-long upload is refused
 * after at most cap + one block of output, not after decoding all of it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <sndfile.h>

#include "audio/ogg_guard.h"
#include "choir/alloc.h"
#include "choir/audio.h"

#define DECODE_BLOCK_FRAMES 4096
/* How much of a file the Ogg Vorbis header check reads (headers are a few kB
 * unless the comment header carries pictures; then the check passes). */
#define GUARD_PREFIX_BYTES (256 * 1024)

/* ---- memory as a libsndfile virtual file ---- */

typedef struct memfile {
    const unsigned char *data;
    sf_count_t len, pos;
} memfile;

static sf_count_t mem_len(void *user) { return ((memfile *)user)->len; }

static sf_count_t mem_seek(sf_count_t offset, int whence, void *user) {
    memfile *m = user;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    sf_count_t pos = base + offset;
    if (pos < 0) return -1;
    m->pos = pos > m->len ? m->len : pos;
    return m->pos;
}

static sf_count_t mem_read(void *ptr, sf_count_t count, void *user) {
    memfile *m = user;
    sf_count_t left = m->len - m->pos;
    if (count > left) count = left;
    if (count <= 0) return 0;
    memcpy(ptr, m->data + m->pos, (size_t)count);
    m->pos += count;
    return count;
}

static sf_count_t mem_write(const void *ptr, sf_count_t count, void *user) {
    (void)ptr;
    (void)count;
    (void)user;
    return 0;
}

static sf_count_t mem_tell(void *user) { return ((memfile *)user)->pos; }

/* ---- shared decode loop ---- */

void choir_audio_clear(choir_audio *a) {
    if (!a) return;
    choir_free(a->samples);
    memset(a, 0, sizeof *a);
}

void choir_audio_mix_mono(const float *in, int64_t frames, int channels, float *out) {
    if (channels == 1) {
        if (out != in) memmove(out, in, (size_t)frames * sizeof(float));
        return;
    }
    float scale = 1.0f / (float)channels;
    for (int64_t i = 0; i < frames; i++) {
        float sum = 0.0f;
        for (int c = 0; c < channels; c++) sum += in[i * channels + c];
        out[i] = sum * scale;
    }
}

static const char *major_name(int format) {
    switch (format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV: return "WAV";
    case SF_FORMAT_WAVEX: return "WAVE_EXTENSIBLE";
    case SF_FORMAT_FLAC: return "FLAC";
    case SF_FORMAT_OGG: return "Ogg";
    case SF_FORMAT_MPEG: return "MP3";
    case SF_FORMAT_AIFF: return "AIFF";
    default: return "audio";
    }
}

/* Appends `frames` frames to out, growing it geometrically. */
static int append_frames(choir_audio *out, int64_t *cap, const float *src, int64_t frames, choir_err *err) {
    if (frames <= 0) return CHOIR_OK;
    int64_t need = out->frames + frames;
    if (need > *cap) {
        int64_t ncap = *cap ? *cap : 65536;
        while (ncap < need) ncap *= 2;
        size_t bytes = (size_t)ncap * (size_t)out->channels * sizeof(float);
        /* The first block comes from choir_alloc so it is counted as I/O memory;
         * realloc keeps the category. */
        float *grown = out->samples ? choir_realloc(out->samples, bytes) : choir_alloc(CHOIR_MEM_IO, bytes);
        if (!grown)
            return choir_err_set(err, CHOIR_ENOMEM, "out of memory for %lld decoded frames", (long long)ncap);
        out->samples = grown;
        *cap = ncap;
    }
    memcpy(out->samples + out->frames * out->channels, src, (size_t)frames * (size_t)out->channels * sizeof(float));
    out->frames = need;
    return CHOIR_OK;
}

/* libsndfile quietly shortens a WAV whose data chunk runs past the end of the
 * file and only notes it in its log ("data : N (should be M)"). A declared
 * size of 0 or near 4 GiB is the placeholder streaming writers use for
 * "unknown length", not a truncation. Returns the bytes missing, or 0. */
static long long wav_bytes_missing(SNDFILE *sf) {
    char log[4096];
    memset(log, 0, sizeof log);
    sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log - 1);
    const char *line = strstr(log, "\ndata : ");
    long long declared = 0, actual = 0;
    if (!line || sscanf(line, "\ndata : %lld (should be %lld)", &declared, &actual) != 2) return 0;
    if (declared <= 0 || declared >= 0x7FFFF000LL || declared <= actual) return 0;
    return declared - actual;
}

static int decode_sndfile(SNDFILE *sf, const SF_INFO *info, const choir_decode_opts *opts, choir_audio *out,
                          choir_err *err) {
    choir_err local;
    if (!err) err = &local; /* the create failure's code is read back from it */
    int in_ch = info->channels;
    int out_ch = opts && opts->mono ? 1 : in_ch;
    int out_rate = opts && opts->target_rate ? opts->target_rate : info->samplerate;
    int64_t max_frames = opts ? opts->max_frames : 0;
    int is_mpeg = (info->format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG;
    int rc = CHOIR_OK;
    float *block = NULL, *resampled = NULL;
    choir_resampler *rs = NULL;
    int64_t cap = 0, read_total = 0;

    if (in_ch <= 0 || in_ch > 256 || info->samplerate <= 0)
        return choir_err_set(err, CHOIR_EFORMAT, "%s header: %d channels at %d Hz is not valid audio",
                             major_name(info->format), in_ch, info->samplerate);
    /* The length in the header (when there is one) lets an over-long input be
     * refused before reading it; MP3 lengths are estimates, so not those. */
    int64_t header_frames = info->frames > 0 && info->frames < SF_COUNT_MAX && !is_mpeg ? info->frames : -1;
    if (max_frames > 0 && header_frames > 0) {
        double expect = (double)header_frames * out_rate / info->samplerate;
        if (expect > (double)max_frames + 1.0)
            return choir_err_set(err, CHOIR_ETOOBIG, "audio is %.1f s long, over the limit of %.1f s",
                                 (double)header_frames / info->samplerate, (double)max_frames / out_rate);
    }

    memset(out, 0, sizeof *out);
    out->channels = out_ch;
    out->rate = out_rate;
    rs = choir_resampler_create(info->samplerate, out_rate, out_ch, err);
    if (!rs) return err->code;
    int64_t rs_cap = choir_resampler_max_out(rs, DECODE_BLOCK_FRAMES) + 64;
    block = choir_alloc(CHOIR_MEM_IO, (size_t)DECODE_BLOCK_FRAMES * (size_t)in_ch * sizeof(float));
    resampled = choir_alloc(CHOIR_MEM_IO, (size_t)rs_cap * (size_t)out_ch * sizeof(float));
    if (!block || !resampled) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory for decode buffers");
        goto fail;
    }
    for (;;) {
        sf_count_t got = sf_readf_float(sf, block, DECODE_BLOCK_FRAMES);
        if (got <= 0) break;
        read_total += got;
        if (out_ch == 1 && in_ch > 1) choir_audio_mix_mono(block, got, in_ch, block);
        /* soxr holds back its filter delay at first, so the room one block
         * needs is asked of the resampler each time, not assumed. */
        int64_t need = choir_resampler_max_out(rs, got);
        if (need > rs_cap) {
            float *grown = choir_realloc(resampled, (size_t)need * (size_t)out_ch * sizeof(float));
            if (!grown) {
                rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory for decode buffers");
                goto fail;
            }
            resampled = grown;
            rs_cap = need;
        }
        int64_t made = 0;
        rc = choir_resampler_process(rs, block, got, resampled, rs_cap, &made, err);
        if (rc) goto fail;
        rc = append_frames(out, &cap, resampled, made, err);
        if (rc) goto fail;
        if (max_frames > 0 && out->frames > max_frames) {
            rc = choir_err_set(err, CHOIR_ETOOBIG, "audio is longer than the limit of %.1f s",
                               (double)max_frames / out_rate);
            goto fail;
        }
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s data is corrupt after %lld frames: %s",
                           major_name(info->format), (long long)read_total, sf_strerror(sf));
        goto fail;
    }
    long long missing = 0;
    int major = info->format & SF_FORMAT_TYPEMASK;
    if ((major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) && (missing = wav_bytes_missing(sf)) > 0) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "WAV data is truncated: %lld bytes missing after %lld frames",
                           missing, (long long)read_total);
        goto fail;
    }
    if (header_frames > 0 && read_total < header_frames) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s data is truncated: header promises %lld frames, only %lld present",
                           major_name(info->format), (long long)header_frames, (long long)read_total);
        goto fail;
    }
    if (read_total == 0) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s file holds no audio samples", major_name(info->format));
        goto fail;
    }
    for (;;) {
        int64_t made = 0;
        rc = choir_resampler_flush(rs, resampled, rs_cap, &made, err);
        if (rc) goto fail;
        if (made == 0) break;
        rc = append_frames(out, &cap, resampled, made, err);
        if (rc) goto fail;
    }
    if (max_frames > 0 && out->frames > max_frames) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "audio is longer than the limit of %.1f s",
                           (double)max_frames / out_rate);
        goto fail;
    }
    choir_free(block);
    choir_free(resampled);
    choir_resampler_free(rs);
    return CHOIR_OK;
fail:
    choir_free(block);
    choir_free(resampled);
    choir_resampler_free(rs);
    choir_audio_clear(out);
    return rc;
}

static int check_opts(const choir_decode_opts *opts, choir_err *err) {
    if (!opts) return CHOIR_OK;
    if (opts->target_rate < 0 || opts->target_rate > 1000000)
        return choir_err_set(err, CHOIR_EINVAL, "decode: target rate %d Hz out of range", opts->target_rate);
    if (opts->max_frames < 0) return choir_err_set(err, CHOIR_EINVAL, "decode: negative max_frames");
    return CHOIR_OK;
}

/* libsndfile says "unrecognised format" both for garbage and for a known
 * container cut short before its header ends; the message names both. */
static int open_error(SNDFILE *sf, const char *what, choir_err *err) {
    int code = sf_error(sf);
    const char *why = sf_strerror(sf);
    if (code == SF_ERR_UNRECOGNISED_FORMAT)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%s: not a supported audio format (WAV, FLAC, Ogg Vorbis/Opus, MP3) or its header is "
                             "truncated: %s", what, why);
    return choir_err_set(err, CHOIR_EFORMAT, "%s: cannot decode: %s", what, why);
}

static int guard_file(const char *path, choir_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return choir_err_set(err, CHOIR_EIO, "%s: %s", path, strerror(errno));
    unsigned char *prefix = choir_alloc(CHOIR_MEM_IO, GUARD_PREFIX_BYTES);
    if (!prefix) {
        fclose(f);
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
    }
    size_t got = fread(prefix, 1, GUARD_PREFIX_BYTES, f);
    int whole = got < GUARD_PREFIX_BYTES && feof(f);
    fclose(f);
    ogg_guard_verdict v = choir_ogg_vorbis_guard(prefix, got, whole);
    choir_free(prefix);
    if (v == OGG_GUARD_BROKEN)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: Ogg Vorbis headers are truncated or damaged", path);
    return CHOIR_OK;
}

int choir_audio_decode_file(const char *path, const choir_decode_opts *opts, choir_audio *out, choir_err *err) {
    if (!out) return choir_err_set(err, CHOIR_EINVAL, "decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return choir_err_set(err, CHOIR_EINVAL, "decode: path is NULL");
    int rc = check_opts(opts, err);
    if (rc) return rc;
    struct stat st;
    if (stat(path, &st) != 0)
        return choir_err_set(err, errno == ENOENT ? CHOIR_ENOTFOUND : CHOIR_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return choir_err_set(err, CHOIR_EIO, "%s: not a regular file", path);
    if (st.st_size == 0) return choir_err_set(err, CHOIR_EFORMAT, "%s: file is empty", path);
    rc = guard_file(path, err);
    if (rc) return rc;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) return open_error(NULL, path, err);
    rc = decode_sndfile(sf, &info, opts, out, err);
    sf_close(sf);
    if (rc) choir_err_prefix(err, "%s", path);
    return rc;
}

int choir_audio_decode_memory(const void *data, size_t len, const choir_decode_opts *opts, choir_audio *out,
                              choir_err *err) {
    if (!out) return choir_err_set(err, CHOIR_EINVAL, "decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (len == 0) return choir_err_set(err, CHOIR_EFORMAT, "audio upload is empty");
    if (!data) return choir_err_set(err, CHOIR_EINVAL, "decode: data is NULL");
    int rc = check_opts(opts, err);
    if (rc) return rc;
    if (choir_ogg_vorbis_guard(data, len, 1) == OGG_GUARD_BROKEN)
        return choir_err_set(err, CHOIR_EFORMAT, "audio upload: Ogg Vorbis headers are truncated or damaged");
    memfile m = {data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO vio = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!sf) return open_error(NULL, "audio upload", err);
    rc = decode_sndfile(sf, &info, opts, out, err);
    sf_close(sf);
    if (rc) choir_err_prefix(err, "audio upload");
    return rc;
}
