/* Ogg Vorbis decoding through libvorbisfile (see vorbis_read.h). */
#include <string.h>

#define OV_EXCLUDE_STATIC_CALLBACKS
#include <vorbis/vorbisfile.h>

#include "audio/vorbis_read.h"
#include "choir/alloc.h"

struct vorbis_reader {
    OggVorbis_File vf;
    int open;           /* vf holds state for ov_clear */
    /* memory source */
    const unsigned char *data;
    size_t len, pos;
    FILE *file;
    int rate, channels;
    int64_t frames;
};

int vorbis_reader_detect(const unsigned char *data, size_t len)
{
    if (len < 28 || memcmp(data, "OggS", 4) != 0)
        return 0;
    size_t body = 27 + (size_t)data[26];
    return body + 7 <= len && memcmp(data + body, "\x01vorbis", 7) == 0;
}

static size_t mem_read(void *ptr, size_t size, size_t nmemb, void *user)
{
    vorbis_reader *r = user;
    if (size == 0)
        return 0;
    size_t want = size * nmemb, left = r->len - r->pos;
    if (want > left)
        want = left - left % size;
    memcpy(ptr, r->data + r->pos, want);
    r->pos += want;
    return want / size;
}

static int mem_seek(void *user, ogg_int64_t offset, int whence)
{
    vorbis_reader *r = user;
    ogg_int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (ogg_int64_t)r->pos : (ogg_int64_t)r->len;
    ogg_int64_t pos = base + offset;
    if (pos < 0 || pos > (ogg_int64_t)r->len)
        return -1;
    r->pos = (size_t)pos;
    return 0;
}

static long mem_tell(void *user)
{
    return (long)((vorbis_reader *)user)->pos;
}

static size_t file_read(void *ptr, size_t size, size_t nmemb, void *user)
{
    return fread(ptr, size, nmemb, ((vorbis_reader *)user)->file);
}

static int file_seek(void *user, ogg_int64_t offset, int whence)
{
    return fseeko(((vorbis_reader *)user)->file, (off_t)offset, whence);
}

static long file_tell(void *user)
{
    return (long)ftello(((vorbis_reader *)user)->file);
}

static const char *ov_reason(int code)
{
    switch (code) {
    case OV_EREAD: return "read error";
    case OV_ENOTVORBIS: return "not Vorbis data";
    case OV_EVERSION: return "unsupported Vorbis version";
    case OV_EBADHEADER: return "invalid Vorbis headers";
    case OV_EFAULT: return "internal decoder fault";
    case OV_EBADLINK: return "damaged stream link";
    case OV_ENOSEEK: return "stream not seekable";
    default: return "undecodable stream";
    }
}

static vorbis_reader *finish_open(vorbis_reader *r, ov_callbacks cb, choir_err *err)
{
    int rc = ov_open_callbacks(r, &r->vf, NULL, 0, cb);
    if (rc < 0) {
        /* libvorbisfile has already cleared what it made */
        choir_err_set(err, CHOIR_EFORMAT, "Ogg Vorbis: %s", ov_reason(rc));
        choir_free(r);
        return NULL;
    }
    r->open = 1;
    vorbis_info *vi = ov_info(&r->vf, -1);
    if (!vi) {
        choir_err_set(err, CHOIR_EFORMAT, "Ogg Vorbis: no stream information");
        vorbis_reader_close(r);
        return NULL;
    }
    r->rate = (int)vi->rate;
    r->channels = vi->channels;
    /* Chained streams may change rate or channel count from link to link;
     * the decoder's output has one of each. */
    long links = ov_streams(&r->vf);
    for (long i = 1; i < links; i++) {
        vorbis_info *li = ov_info(&r->vf, (int)i);
        if (!li || li->rate != vi->rate || li->channels != vi->channels) {
            choir_err_set(err, CHOIR_EUNSUPPORTED, "Ogg Vorbis: chained stream whose links differ in rate or channels");
            vorbis_reader_close(r);
            return NULL;
        }
    }
    ogg_int64_t total = ov_seekable(&r->vf) ? ov_pcm_total(&r->vf, -1) : OV_EINVAL;
    r->frames = total >= 0 ? (int64_t)total : -1;
    return r;
}

vorbis_reader *vorbis_reader_open_memory(const void *data, size_t len, choir_err *err)
{
    vorbis_reader *r = choir_calloc(CHOIR_MEM_IO, 1, sizeof *r);
    if (!r) {
        choir_err_set(err, CHOIR_ENOMEM, "Ogg Vorbis: out of memory");
        return NULL;
    }
    r->data = data;
    r->len = len;
    ov_callbacks cb = {mem_read, mem_seek, NULL, mem_tell};
    return finish_open(r, cb, err);
}

vorbis_reader *vorbis_reader_open_file(FILE *f, choir_err *err)
{
    vorbis_reader *r = choir_calloc(CHOIR_MEM_IO, 1, sizeof *r);
    if (!r) {
        choir_err_set(err, CHOIR_ENOMEM, "Ogg Vorbis: out of memory");
        return NULL;
    }
    r->file = f;
    ov_callbacks cb = {file_read, file_seek, NULL, file_tell};
    return finish_open(r, cb, err);
}

int vorbis_reader_rate(const vorbis_reader *r)
{
    return r->rate;
}

int vorbis_reader_channels(const vorbis_reader *r)
{
    return r->channels;
}

int64_t vorbis_reader_frames(const vorbis_reader *r)
{
    return r->frames;
}

int64_t vorbis_reader_read(vorbis_reader *r, float *out, int64_t max, choir_err *err)
{
    int64_t got = 0;
    int holes = 0;
    while (got < max) {
        float **pcm = NULL;
        int link = 0;
        int want = max - got > 65536 ? 65536 : (int)(max - got);
        long n = ov_read_float(&r->vf, &pcm, want, &link);
        if (n == 0)
            break;
        if (n == OV_HOLE) {
            /* a gap or a damaged page: libvorbisfile resynchronises on the
             * next page, as players do; a stream of nothing but holes still
             * ends, because each one consumes input */
            if (++holes > 1000000)
                return choir_err_set(err, CHOIR_EFORMAT, "Ogg Vorbis: no decodable audio");
            continue;
        }
        if (n < 0)
            return choir_err_set(err, CHOIR_EFORMAT, "Ogg Vorbis: %s after %lld frames", ov_reason((int)n),
                                 (long long)got);
        vorbis_info *vi = ov_info(&r->vf, link);
        if (!vi || vi->channels != r->channels)
            return choir_err_set(err, CHOIR_EFORMAT, "Ogg Vorbis: the channel count changes mid-stream");
        int ch = r->channels;
        for (long i = 0; i < n; i++)
            for (int c = 0; c < ch; c++)
                out[(got + i) * ch + c] = pcm[c][i];
        got += n;
    }
    return got;
}

void vorbis_reader_close(vorbis_reader *r)
{
    if (!r)
        return;
    if (r->open)
        ov_clear(&r->vf);
    choir_free(r);
}
