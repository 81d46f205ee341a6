/* Decoding audio from a file or from memory, with optional mix-down and
 * resampling: Ogg Vorbis through libvorbisfile (vorbis_read.c), everything
 * else (WAV, FLAC, Ogg Opus, MP3) through libsndfile.
 *
 * Both are "sources" feeding one loop: input is read in blocks and pushed
 * through the mix-down and the streaming resampler block by block, so the
 * only buffer that grows is the output. Its size is known before any sample
 * is decoded when the header states the length (then it is allocated once,
 * exactly, through the caller's allocator, which may refuse it), and the
 * length cap is enforced before reading in that case and while reading
 * otherwise. The input block shrinks as the resampling ratio grows, so one
 * block never makes more than a few thousand output frames. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <sndfile.h>

#include "audio/ogg_guard.h"
#include "audio/vorbis_read.h"
#include "choir/alloc.h"
#include "choir/audio.h"

#define DECODE_BLOCK_FRAMES 4096
/* How much of a file the Ogg header checks read (headers are a few kB unless
 * the comment header carries pictures; then the structural check passes). */
#define GUARD_PREFIX_BYTES (256 * 1024)
/* Input sample rates outside this range are not audio anyone records speech
 * in; a header claiming 1 Hz only serves to turn a small upload into a huge
 * resampled one. */
#define MIN_INPUT_RATE 1000
#define MAX_INPUT_RATE 768000

/* ---- sources ---- */

typedef struct source {
    const char *format; /* "WAV", "Ogg Vorbis", ... for messages */
    int rate, channels;
    int64_t frames;     /* from the header, or -1 when unknown (or only estimated) */
    /* Reads up to `max` interleaved frames; returns the count (0 at the end)
     * or a negative code with err. */
    int64_t (*read)(struct source *s, float *out, int64_t max, choir_err *err);
    /* After the last read: checks what the format can say about truncation. */
    int (*finish)(struct source *s, int64_t frames_read, choir_err *err);
    SNDFILE *sf;
    int sf_major;       /* SF_FORMAT_TYPEMASK bits of a libsndfile source */
    vorbis_reader *vr;
} source;

/* memory as a libsndfile virtual file */
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

static int64_t sf_source_read(source *s, float *out, int64_t max, choir_err *err) {
    (void)err;
    sf_count_t got = sf_readf_float(s->sf, out, max);
    return got > 0 ? (int64_t)got : 0;
}

static int sf_source_finish(source *s, int64_t frames_read, choir_err *err) {
    if (sf_error(s->sf) != SF_ERR_NO_ERROR)
        return choir_err_set(err, CHOIR_EFORMAT, "%s data is corrupt after %lld frames: %s", s->format,
                             (long long)frames_read, sf_strerror(s->sf));
    int major = s->sf_major;
    long long missing;
    if ((major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) && (missing = wav_bytes_missing(s->sf)) > 0)
        return choir_err_set(err, CHOIR_EFORMAT, "WAV data is truncated: %lld bytes missing after %lld frames",
                             missing, (long long)frames_read);
    return CHOIR_OK;
}

static void sf_source_init(source *s, SNDFILE *sf, const SF_INFO *info) {
    memset(s, 0, sizeof *s);
    s->sf = sf;
    s->sf_major = info->format & SF_FORMAT_TYPEMASK;
    s->format = major_name(info->format);
    s->rate = info->samplerate;
    s->channels = info->channels;
    /* MP3 lengths are estimates, so not those. */
    int is_mpeg = (info->format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG;
    s->frames = info->frames > 0 && info->frames < SF_COUNT_MAX && !is_mpeg ? info->frames : -1;
    s->read = sf_source_read;
    s->finish = sf_source_finish;
}

static int64_t vorbis_source_read(source *s, float *out, int64_t max, choir_err *err) {
    return vorbis_reader_read(s->vr, out, max, err);
}

static void vorbis_source_init(source *s, vorbis_reader *vr) {
    memset(s, 0, sizeof *s);
    s->vr = vr;
    s->format = "Ogg Vorbis";
    s->rate = vorbis_reader_rate(vr);
    s->channels = vorbis_reader_channels(vr);
    s->frames = vorbis_reader_frames(vr);
    s->read = vorbis_source_read;
}

/* ---- the shared decode loop ---- */

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

static void *out_alloc(const choir_decode_opts *opts, size_t bytes, choir_err *err) {
    if (opts && opts->alloc) return opts->alloc(opts->alloc_user, bytes, err);
    void *p = choir_alloc(CHOIR_MEM_IO, bytes);
    if (!p) choir_err_set(err, CHOIR_ENOMEM, "out of memory for %zu bytes of decoded audio", bytes);
    return p;
}

/* Makes room for `need` frames in out (capacity *cap frames). The first block
 * is `first` frames when that is larger; later ones grow by half, which keeps
 * the moment when the old and the new block are both held short of 2.5x. */
static int reserve_frames(choir_audio *out, int64_t *cap, int64_t need, int64_t first, const choir_decode_opts *opts,
                          choir_err *err) {
    if (need <= *cap) return CHOIR_OK;
    int64_t ncap = *cap ? *cap + *cap / 2 : first > 0 ? first : 65536;
    if (ncap < need) ncap = need;
    size_t bytes = (size_t)ncap * (size_t)out->channels * sizeof(float);
    float *grown = out_alloc(opts, bytes, err);
    if (!grown) return err->code ? err->code : CHOIR_ENOMEM;
    if (out->samples) {
        memcpy(grown, out->samples, (size_t)out->frames * (size_t)out->channels * sizeof(float));
        choir_free(out->samples);
    }
    out->samples = grown;
    *cap = ncap;
    return CHOIR_OK;
}

static int cancelled(const choir_decode_opts *opts) {
    return opts && opts->cancel && __atomic_load_n(opts->cancel, __ATOMIC_ACQUIRE);
}

static int decode_source(source *src, const choir_decode_opts *opts, choir_audio *out, choir_err *err) {
    choir_err local = {0};
    if (!err) err = &local; /* codes are read back from it */
    int in_ch = src->channels, in_rate = src->rate;
    int out_ch = opts && opts->mono ? 1 : in_ch;
    int out_rate = opts && opts->target_rate ? opts->target_rate : in_rate;
    int64_t max_frames = opts ? opts->max_frames : 0;
    int rc = CHOIR_OK;
    float *block = NULL, *resampled = NULL;
    choir_resampler *rs = NULL;
    int64_t cap = 0, read_total = 0;

    if (in_ch <= 0 || in_ch > 256 || in_rate <= 0)
        return choir_err_set(err, CHOIR_EFORMAT, "%s header: %d channels at %d Hz is not valid audio", src->format,
                             in_ch, in_rate);
    if (in_rate < MIN_INPUT_RATE || in_rate > MAX_INPUT_RATE)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s at %d Hz: sample rates from %d to %d Hz are supported",
                             src->format, in_rate, MIN_INPUT_RATE, MAX_INPUT_RATE);
    /* The decoded length, when the header states it: over the cap is refused
     * before reading, and the output is allocated once at that size. */
    int64_t expect = src->frames > 0 ? (src->frames * out_rate + in_rate - 1) / in_rate + 2 : -1;
    if (max_frames > 0 && expect > max_frames + 2)
        return choir_err_set(err, CHOIR_ETOOBIG, "audio is %.1f s long, over the limit of %.1f s",
                             (double)src->frames / in_rate, (double)max_frames / out_rate);

    memset(out, 0, sizeof *out);
    out->channels = out_ch;
    out->rate = out_rate;
    if (expect > 0 && (rc = reserve_frames(out, &cap, expect, expect, opts, err)) != CHOIR_OK) goto fail;
    rs = choir_resampler_create(in_rate, out_rate, out_ch, err);
    if (!rs) {
        rc = err->code;
        goto fail;
    }
    int64_t in_block = DECODE_BLOCK_FRAMES;
    if (out_rate > in_rate) in_block = (int64_t)DECODE_BLOCK_FRAMES * in_rate / out_rate + 1;
    int64_t rs_cap = choir_resampler_max_out(rs, in_block) + 64;
    block = choir_alloc(CHOIR_MEM_IO, (size_t)in_block * (size_t)in_ch * sizeof(float));
    resampled = choir_alloc(CHOIR_MEM_IO, (size_t)rs_cap * (size_t)out_ch * sizeof(float));
    if (!block || !resampled) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory for decode buffers");
        goto fail;
    }
    for (;;) {
        if (cancelled(opts)) {
            rc = choir_err_set(err, CHOIR_ECANCELED, "decoding was cancelled");
            goto fail;
        }
        int64_t got = src->read(src, block, in_block, err);
        if (got < 0) {
            rc = (int)got;
            goto fail;
        }
        if (got == 0) break;
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
        if (max_frames > 0 && out->frames + made > max_frames) {
            rc = choir_err_set(err, CHOIR_ETOOBIG, "audio is longer than the limit of %.1f s",
                               (double)max_frames / out_rate);
            goto fail;
        }
        if ((rc = reserve_frames(out, &cap, out->frames + made, out_rate, opts, err)) != CHOIR_OK) goto fail;
        /* the resampler may hold back a whole first block (its delay): then
         * nothing is reserved yet and samples may still be NULL */
        if (made > 0)
            memcpy(out->samples + out->frames * out_ch, resampled, (size_t)made * (size_t)out_ch * sizeof(float));
        out->frames += made;
    }
    if (src->finish && (rc = src->finish(src, read_total, err)) != CHOIR_OK) goto fail;
    if (src->frames > 0 && read_total < src->frames) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s data is truncated: header promises %lld frames, only %lld present",
                           src->format, (long long)src->frames, (long long)read_total);
        goto fail;
    }
    if (read_total == 0) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s file holds no audio samples", src->format);
        goto fail;
    }
    for (;;) {
        int64_t made = 0;
        rc = choir_resampler_flush(rs, resampled, rs_cap, &made, err);
        if (rc) goto fail;
        if (made == 0) break;
        if (max_frames > 0 && out->frames + made > max_frames) {
            rc = choir_err_set(err, CHOIR_ETOOBIG, "audio is longer than the limit of %.1f s",
                               (double)max_frames / out_rate);
            goto fail;
        }
        if ((rc = reserve_frames(out, &cap, out->frames + made, out_rate, opts, err)) != CHOIR_OK) goto fail;
        memcpy(out->samples + out->frames * out_ch, resampled, (size_t)made * (size_t)out_ch * sizeof(float));
        out->frames += made;
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

int choir_audio_decode_file(const char *path, const choir_decode_opts *opts, choir_audio *out, choir_err *err) {
    choir_err local = {0};
    if (!err) err = &local; /* codes are read back from it */
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
    FILE *f = fopen(path, "rb");
    if (!f) return choir_err_set(err, CHOIR_EIO, "%s: %s", path, strerror(errno));
    unsigned char *prefix = choir_alloc(CHOIR_MEM_IO, GUARD_PREFIX_BYTES);
    if (!prefix) {
        fclose(f);
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
    }
    size_t got = fread(prefix, 1, GUARD_PREFIX_BYTES, f);
    int whole = got < GUARD_PREFIX_BYTES && feof(f);
    ogg_guard_verdict v = choir_ogg_vorbis_guard(prefix, got, whole);
    int vorbis = vorbis_reader_detect(prefix, got);
    choir_free(prefix);
    if (v == OGG_GUARD_BROKEN) {
        fclose(f);
        return choir_err_set(err, CHOIR_EFORMAT, "%s: Ogg Vorbis headers are truncated or damaged", path);
    }
    source src;
    if (vorbis) {
        rewind(f);
        vorbis_reader *vr = vorbis_reader_open_file(f, err);
        if (!vr) {
            fclose(f);
            choir_err_prefix(err, "%s", path);
            return err->code;
        }
        vorbis_source_init(&src, vr);
        rc = decode_source(&src, opts, out, err);
        vorbis_reader_close(vr);
        fclose(f);
    } else {
        fclose(f);
        SF_INFO info;
        memset(&info, 0, sizeof info);
        SNDFILE *sf = sf_open(path, SFM_READ, &info);
        if (!sf) return open_error(NULL, path, err);
        sf_source_init(&src, sf, &info);
        rc = decode_source(&src, opts, out, err);
        sf_close(sf);
    }
    if (rc) choir_err_prefix(err, "%s", path);
    return rc;
}

int choir_audio_decode_memory(const void *data, size_t len, const choir_decode_opts *opts, choir_audio *out,
                              choir_err *err) {
    choir_err local = {0};
    if (!err) err = &local; /* codes are read back from it */
    if (!out) return choir_err_set(err, CHOIR_EINVAL, "decode: out is NULL");
    memset(out, 0, sizeof *out);
    if (len == 0) return choir_err_set(err, CHOIR_EFORMAT, "audio upload is empty");
    if (!data) return choir_err_set(err, CHOIR_EINVAL, "decode: data is NULL");
    int rc = check_opts(opts, err);
    if (rc) return rc;
    if (choir_ogg_vorbis_guard(data, len, 1) == OGG_GUARD_BROKEN)
        return choir_err_set(err, CHOIR_EFORMAT, "audio upload: Ogg Vorbis headers are truncated or damaged");
    source src;
    if (vorbis_reader_detect(data, len)) {
        vorbis_reader *vr = vorbis_reader_open_memory(data, len, err);
        if (!vr) {
            choir_err_prefix(err, "audio upload");
            return err->code;
        }
        vorbis_source_init(&src, vr);
        rc = decode_source(&src, opts, out, err);
        vorbis_reader_close(vr);
    } else {
        memfile m = {data, (sf_count_t)len, 0};
        SF_VIRTUAL_IO vio = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
        SF_INFO info;
        memset(&info, 0, sizeof info);
        SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, &m);
        if (!sf) return open_error(NULL, "audio upload", err);
        sf_source_init(&src, sf, &info);
        rc = decode_source(&src, opts, out, err);
        sf_close(sf);
    }
    if (rc) choir_err_prefix(err, "audio upload");
    return rc;
}
