#include "bombs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ogg/ogg.h>
#include <vorbis/vorbisenc.h>

typedef struct buf {
    unsigned char *data;
    size_t len, cap;
} buf;

static int put(buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *g = realloc(b->data, cap);
        if (!g)
            return -1;
        b->data = g;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_pages(buf *b, ogg_stream_state *os, int flush)
{
    ogg_page pg;
    while (flush ? ogg_stream_flush(os, &pg) : ogg_stream_pageout(os, &pg))
        if (put(b, pg.header, (size_t)pg.header_len) < 0 || put(b, pg.body, (size_t)pg.body_len) < 0)
            return -1;
    return 0;
}

/* Encodes `seconds` of `signal` (0: silence, 1: a tone); with `repeat` > 0,
 * keeps only the headers and writes the steady-state packet `repeat` times. */
static unsigned char *encode(int rate, double seconds, int tone, int64_t repeat, size_t *len)
{
    vorbis_info vi;
    vorbis_comment vc;
    vorbis_dsp_state vd;
    vorbis_block vb;
    ogg_stream_state os;
    buf out = {0};
    vorbis_info_init(&vi);
    if (vorbis_encode_init_vbr(&vi, 1, rate, tone ? 0.3f : -0.1f) != 0) {
        vorbis_info_clear(&vi);
        return NULL;
    }
    vorbis_comment_init(&vc);
    vorbis_analysis_init(&vd, &vi);
    vorbis_block_init(&vd, &vb);
    ogg_stream_init(&os, 0x43484f52);
    ogg_packet h[3];
    vorbis_analysis_headerout(&vd, &vc, &h[0], &h[1], &h[2]);
    for (int i = 0; i < 3; i++)
        ogg_stream_packetin(&os, &h[i]);
    put_pages(&out, &os, 1);

    int64_t frames = (int64_t)(seconds * rate), done = 0;
    long long_bs = vorbis_info_blocksize(&vi, 1);
    unsigned char *steady = NULL;
    long steady_len = 0;
    int n_audio = 0;
    while (!repeat || !steady) {
        if (done < frames) {
            int64_t n = frames - done < 1024 ? frames - done : 1024;
            float **in = vorbis_analysis_buffer(&vd, (int)n);
            for (int64_t i = 0; i < n; i++)
                in[0][i] = tone ? 0.3f * sinf((float)(done + i) * 0.05f) : 0.0f;
            vorbis_analysis_wrote(&vd, (int)n);
            done += n;
        } else {
            vorbis_analysis_wrote(&vd, 0);
        }
        int ended = 0;
        while (vorbis_analysis_blockout(&vd, &vb) == 1) {
            vorbis_analysis(&vb, NULL);
            vorbis_bitrate_addblock(&vb);
            ogg_packet op;
            while (vorbis_bitrate_flushpacket(&vd, &op)) {
                n_audio++;
                if (!repeat) {
                    ogg_stream_packetin(&os, &op);
                    put_pages(&out, &os, 0);
                    ended |= op.e_o_s != 0;
                } else if (!steady && n_audio > 4 && vorbis_packet_blocksize(&vi, &op) == long_bs && !op.e_o_s) {
                    steady = malloc((size_t)op.bytes);
                    memcpy(steady, op.packet, (size_t)op.bytes);
                    steady_len = op.bytes;
                }
            }
        }
        if (ended || (done >= frames && !repeat))
            break;
        if (repeat && done >= frames && !steady)
            break; /* never reached a steady long block */
    }
    if (repeat && steady) {
        /* Every long block after a long block completes long_bs / 2 frames;
         * the first one completes none (it only primes the overlap). */
        for (int64_t k = 0; k < repeat; k++) {
            ogg_packet op = {.packet = steady, .bytes = steady_len, .b_o_s = 0, .e_o_s = k == repeat - 1,
                             .granulepos = k * (long_bs / 2), .packetno = 3 + k};
            ogg_stream_packetin(&os, &op);
            put_pages(&out, &os, 0);
        }
    }
    put_pages(&out, &os, 1);
    free(steady);
    ogg_stream_clear(&os);
    vorbis_block_clear(&vb);
    vorbis_dsp_clear(&vd);
    vorbis_comment_clear(&vc);
    vorbis_info_clear(&vi);
    if (repeat && !steady_len) {
        free(out.data);
        return NULL;
    }
    *len = out.len;
    return out.data;
}

unsigned char *bomb_vorbis_silence(double seconds, int rate, size_t *len)
{
    /* the long block size at this rate, from a throwaway encoder */
    vorbis_info vi;
    vorbis_info_init(&vi);
    long bs = vorbis_encode_init_vbr(&vi, 1, rate, -0.1f) == 0 ? vorbis_info_blocksize(&vi, 1) : 0;
    vorbis_info_clear(&vi);
    if (bs <= 0)
        return NULL;
    int64_t packets = (int64_t)ceil(seconds * rate / (double)(bs / 2)) + 1;
    return encode(rate, 2.0, 0, packets, len);
}

unsigned char *bomb_vorbis_tone(int rate, size_t *len)
{
    return encode(rate, 1.0, 1, 0, len);
}

unsigned char *bomb_wav(int rate, int64_t frames, size_t *len)
{
    size_t n = 44 + (size_t)frames * 2;
    unsigned char *w = calloc(1, n);
    if (!w)
        return NULL;
    uint32_t v;
    memcpy(w, "RIFF", 4);
    v = (uint32_t)(n - 8);
    memcpy(w + 4, &v, 4);
    memcpy(w + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(w + 16, &v, 4);
    uint16_t fmt = 1, ch = 1, align = 2, bits = 16;
    memcpy(w + 20, &fmt, 2);
    memcpy(w + 22, &ch, 2);
    v = (uint32_t)rate;
    memcpy(w + 24, &v, 4);
    v = (uint32_t)rate * 2;
    memcpy(w + 28, &v, 4);
    memcpy(w + 32, &align, 2);
    memcpy(w + 34, &bits, 2);
    memcpy(w + 36, "data", 4);
    v = (uint32_t)(frames * 2);
    memcpy(w + 40, &v, 4);
    for (int64_t i = 0; i < frames; i++) {
        int16_t s = (int16_t)((i % 2000) * 16 - 16000);
        memcpy(w + 44 + 2 * i, &s, 2);
    }
    *len = n;
    return w;
}

static uint32_t ogg_crc(const unsigned char *p, size_t n)
{
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (i >= 22 && i < 26) ? 0 : p[i];
        c ^= (uint32_t)b << 24;
        for (int k = 0; k < 8; k++)
            c = (c & 0x80000000u) ? (c << 1) ^ 0x04c11db7u : c << 1;
    }
    return c;
}

void bomb_ogg_fix_crcs(unsigned char *d, size_t len)
{
    size_t pos = 0;
    while (pos + 27 <= len && memcmp(d + pos, "OggS", 4) == 0) {
        unsigned ns = d[pos + 26];
        if (pos + 27 + ns > len)
            break;
        size_t body = 0;
        for (unsigned s = 0; s < ns; s++)
            body += d[pos + 27 + s];
        size_t pl = 27 + ns + body;
        if (pos + pl > len)
            break;
        uint32_t c = ogg_crc(d + pos, pl);
        for (int k = 0; k < 4; k++)
            d[pos + 22 + k] = (unsigned char)(c >> (8 * k));
        pos += pl;
    }
}
