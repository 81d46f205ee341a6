/* Encoders: exact bytes for WAV/PCM, lossless FLAC round trip, streamed
 * MP3/Opus identical to one-shot (no seams), sink failures, file sizes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "testutil.h"

typedef struct membuf {
    unsigned char *data;
    size_t len, cap;
    int calls, fail_at; /* fail_at > 0: refuse that call */
} membuf;

static int mem_write(const void *data, size_t len, void *user) {
    membuf *m = user;
    m->calls++;
    if (m->fail_at && m->calls >= m->fail_at) return -1;
    if (m->len + len > m->cap) {
        m->cap = (m->len + len) * 2;
        m->data = realloc(m->data, m->cap);
    }
    memcpy(m->data + m->len, data, len);
    m->len += len;
    return 0;
}

/* Speech-like test signal: two tones with a slow envelope, on the 16-bit grid
 * so lossless paths can be compared exactly. */
static float *signal(int64_t frames, int channels, int rate) {
    float *x = malloc((size_t)frames * channels * sizeof(float));
    for (int64_t i = 0; i < frames; i++)
        for (int c = 0; c < channels; c++) {
            double t = (double)i / rate;
            double v = 0.4 * sin(2 * M_PI * (220 + 110 * c) * t) * (0.6 + 0.4 * sin(2 * M_PI * 3 * t)) +
                       0.1 * sin(2 * M_PI * 1800 * t);
            x[i * channels + c] = (float)(lrint(v * 32768) / 32768.0);
        }
    return x;
}

/* Encodes x in pieces of growing, uneven size. */
static void encode_pieces(choir_audio_format f, int rate, int ch, const float *x, int64_t frames, int piece0,
                          membuf *out) {
    choir_err err;
    choir_encoder *e = choir_encoder_create(f, rate, ch, mem_write, out, &err);
    assert_non_null(e);
    int64_t at = 0, piece = piece0;
    while (at < frames) {
        int64_t n = piece < frames - at ? piece : frames - at;
        assert_int_equal(choir_encoder_write(e, x + at * ch, n, &err), 0);
        at += n;
        piece = piece * 2 + 13;
    }
    assert_int_equal(choir_encoder_finish(e, &err), 0);
    choir_encoder_free(e);
}

static void test_wav_and_pcm_exact(void **state) {
    (void)state;
    const int rate = 24000, ch = 2;
    const int64_t frames = 10007;
    float *x = signal(frames, ch, rate);
    membuf wav = {0}, pcm = {0};
    encode_pieces(CHOIR_FORMAT_WAV16, rate, ch, x, frames, 1, &wav);
    encode_pieces(CHOIR_FORMAT_PCM16, rate, ch, x, frames, 100, &pcm);
    /* The in-memory form gives the same bytes as the streamed one. */
    void *mem = NULL;
    size_t mem_len = 0;
    choir_err merr;
    assert_int_equal(choir_audio_encode_memory(CHOIR_FORMAT_WAV16, x, frames, rate, ch, &mem, &mem_len, &merr), 0);
    assert_int_equal(mem_len, wav.len);
    assert_memory_equal(mem, wav.data, wav.len);
    choir_free(mem);
    assert_int_equal(wav.len, 44 + (size_t)frames * ch * 2);
    assert_int_equal(pcm.len, (size_t)frames * ch * 2);
    /* Streamed: sizes unknown. */
    assert_memory_equal(wav.data, "RIFF\xff\xff\xff\xffWAVEfmt ", 16);
    assert_memory_equal(wav.data + 36, "data\xff\xff\xff\xff", 8);
    assert_memory_equal(wav.data + 44, pcm.data, pcm.len);
    for (int64_t i = 0; i < frames * ch; i++) {
        int16_t s = (int16_t)(pcm.data[2 * i] | pcm.data[2 * i + 1] << 8);
        assert_int_equal(s, lrint(x[i] * 32768));
    }
    /* The streamed WAV decodes back to the same samples. */
    choir_audio a;
    choir_err err;
    assert_int_equal(choir_audio_decode_memory(wav.data, wav.len, NULL, &a, &err), 0);
    assert_int_equal(a.frames, frames);
    assert_int_equal(a.rate, rate);
    assert_memory_equal(a.samples, x, (size_t)frames * ch * sizeof(float));
    choir_audio_clear(&a);

    /* Clipping. */
    float loud[3] = {1.5f, -2.0f, 0.99999f};
    membuf clip = {0};
    encode_pieces(CHOIR_FORMAT_PCM16, rate, 1, loud, 3, 3, &clip);
    int16_t s[3];
    memcpy(s, clip.data, 6);
    assert_int_equal(s[0], 32767);
    assert_int_equal(s[1], -32768);
    assert_int_equal(s[2], 32767);
    free(clip.data);
    free(wav.data);
    free(pcm.data);
    free(x);
}

static void test_wav_files(void **state) {
    (void)state;
    const int rate = 16000;
    const int64_t frames = 5000;
    float *x = signal(frames, 1, rate);
    choir_err err;
    const char *p16 = tu_tmpfile("a16.wav"), *pf = tu_tmpfile("af.wav");
    assert_int_equal(choir_audio_encode_file(p16, CHOIR_FORMAT_WAV16, x, frames, rate, 1, &err), 0);
    assert_int_equal(choir_audio_encode_file(pf, CHOIR_FORMAT_WAVF32, x, frames, rate, 1, &err), 0);
    size_t len = 0;
    unsigned char *raw = tu_read_file(p16, &len);
    assert_int_equal(len, 44 + frames * 2);
    /* A file's sizes are filled in at finish. */
    assert_int_equal(raw[40] | raw[41] << 8 | raw[42] << 16 | raw[43] << 24, frames * 2);
    assert_int_equal(raw[4] | raw[5] << 8 | raw[6] << 16 | raw[7] << 24, 36 + frames * 2);
    free(raw);
    const char *paths[2] = {p16, pf};
    for (int i = 0; i < 2; i++) {
        choir_audio a;
        assert_int_equal(choir_audio_decode_file(paths[i], NULL, &a, &err), 0);
        assert_int_equal(a.frames, frames);
        assert_memory_equal(a.samples, x, (size_t)frames * sizeof(float));
        choir_audio_clear(&a);
    }
    free(x);
}

static void test_flac_lossless(void **state) {
    (void)state;
    const int rate = 24000, ch = 1;
    const int64_t frames = 48000;
    float *x = signal(frames, ch, rate);
    membuf flac = {0};
    encode_pieces(CHOIR_FORMAT_FLAC, rate, ch, x, frames, 7, &flac);
    assert_memory_equal(flac.data, "fLaC", 4);
    assert_true(flac.len < (size_t)frames * 2); /* it compressed */
    choir_audio a;
    choir_err err;
    int rc = choir_audio_decode_memory(flac.data, flac.len, NULL, &a, &err);
    if (rc) print_message("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(a.frames, frames);
    assert_memory_equal(a.samples, x, (size_t)frames * sizeof(float));
    choir_audio_clear(&a);
    free(flac.data);
    free(x);
}

/* SNR of the decoded lossy stream against the input, searching the codec's
 * delay (given in input samples) within +-max_lag. */
static double lossy_snr(const float *x, int64_t n, const float *y, int64_t ny, int max_lag) {
    double best = -1e9;
    for (int lag = 0; lag <= max_lag; lag++) {
        double sig = 0, noise = 0;
        for (int64_t i = 2000; i < n - 2000 && i + lag < ny; i++) {
            sig += (double)x[i] * x[i];
            noise += ((double)y[i + lag] - x[i]) * ((double)y[i + lag] - x[i]);
        }
        double snr = 10 * log10(sig / noise);
        if (snr > best) best = snr;
    }
    return best;
}

static void check_lossy(choir_audio_format f, int rate, double min_snr) {
    const int64_t frames = rate * 2;
    float *x = signal(frames, 1, rate);
    membuf one = {0}, streamed = {0};
    encode_pieces(f, rate, 1, x, frames, (int)frames, &one);
    encode_pieces(f, rate, 1, x, frames, 1, &streamed);
    /* The codec state carries across pieces: streamed bytes equal one-shot bytes. */
    assert_int_equal(streamed.len, one.len);
    assert_memory_equal(streamed.data, one.data, one.len);
    choir_audio a;
    choir_err err;
    choir_decode_opts opts = {.target_rate = rate, .mono = 1, .max_frames = 0};
    int rc = choir_audio_decode_memory(one.data, one.len, &opts, &a, &err);
    if (rc) print_message("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_true(llabs(a.frames - frames) < rate / 10);
    double snr = lossy_snr(x, frames, a.samples, a.frames, 3000);
    print_message("%s at %d Hz: %zu bytes, SNR %.1f dB\n", choir_audio_format_name(f), rate, one.len, snr);
    assert_true(snr > min_snr);
    choir_audio_clear(&a);
    free(one.data);
    free(streamed.data);
    free(x);
}

static void test_mp3_streams_without_seams(void **state) {
    (void)state;
    check_lossy(CHOIR_FORMAT_MP3, 24000, 20.0); /* measured 26.0 dB at 64 kbit/s */
}

static void test_opus_streams_without_seams(void **state) {
    (void)state;
    check_lossy(CHOIR_FORMAT_OPUS, 24000, 28.0); /* measured 33.9 dB */
}

/* Decodes an ADTS stream with libavcodec's AAC decoder, frame by frame as
 * the ADTS headers delimit them (checking each header on the way). */
static float *decode_adts(const uint8_t *b, size_t len, int want_rate_index, int64_t *n_out) {
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_AAC);
    assert_non_null(codec);
    AVCodecContext *ctx = avcodec_alloc_context3(codec);
    AVPacket *pkt = av_packet_alloc();
    AVFrame *fr = av_frame_alloc();
    assert_int_equal(avcodec_open2(ctx, codec, NULL), 0);
    float *out = NULL;
    int64_t n = 0, cap = 0;
    size_t at = 0;
    int n_frames = 0;
    while (at < len) {
        assert_true(len - at >= 7);
        assert_int_equal(b[at], 0xFF);
        assert_int_equal(b[at + 1] & 0xF6, 0xF0);                 /* sync, layer 0 */
        assert_int_equal((b[at + 2] >> 6) & 3, 1);                /* AAC LC */
        assert_int_equal((b[at + 2] >> 2) & 15, want_rate_index); /* sampling rate */
        assert_int_equal(((b[at + 2] & 1) << 2) | (b[at + 3] >> 6), 1); /* mono */
        size_t flen = ((size_t)(b[at + 3] & 3) << 11) | ((size_t)b[at + 4] << 3) | (b[at + 5] >> 5);
        assert_true(flen > 7 && at + flen <= len);
        assert_int_equal(av_new_packet(pkt, (int)flen), 0);
        memcpy(pkt->data, b + at, flen);
        assert_int_equal(avcodec_send_packet(ctx, pkt), 0);
        av_packet_unref(pkt);
        while (avcodec_receive_frame(ctx, fr) == 0) {
            assert_int_equal(fr->format, AV_SAMPLE_FMT_FLTP);
            if (n + fr->nb_samples > cap) {
                cap = 2 * (n + fr->nb_samples);
                out = realloc(out, (size_t)cap * sizeof *out);
            }
            memcpy(out + n, fr->extended_data[0], (size_t)fr->nb_samples * sizeof *out);
            n += fr->nb_samples;
        }
        at += flen;
        n_frames++;
    }
    assert_true(n_frames > 10);
    av_frame_free(&fr);
    av_packet_free(&pkt);
    avcodec_free_context(&ctx);
    *n_out = n;
    return out;
}

static void test_aac_decodes_back(void **state) {
    (void)state;
    const int rates[2] = {24000, 16000}, rate_index[2] = {6, 8};
    for (int r = 0; r < 2; r++) {
        int rate = rates[r];
        const int64_t frames = rate * 2;
        float *x = signal(frames, 1, rate);
        membuf one = {0}, streamed = {0};
        encode_pieces(CHOIR_FORMAT_AAC, rate, 1, x, frames, (int)frames, &one);
        encode_pieces(CHOIR_FORMAT_AAC, rate, 1, x, frames, 333, &streamed);
        /* the codec state carries across pieces: streamed bytes equal one-shot bytes */
        assert_int_equal(streamed.len, one.len);
        assert_memory_equal(streamed.data, one.data, one.len);
        int64_t n;
        float *y = decode_adts((const uint8_t *)one.data, one.len, rate_index[r], &n);
        /* priming (1024) and the padded last frame: at most 3 codec frames more */
        assert_true(n >= frames && n <= frames + 3 * 1024);
        double snr = lossy_snr(x, frames, y, n, 3000);
        print_message("aac at %d Hz: %zu bytes, %lld samples decoded, SNR %.1f dB\n", rate, one.len, (long long)n,
                      snr);
        assert_true(snr > 30.0); /* measured 42.2 dB at 24 kHz, 61.1 dB at 16 kHz (64 kbit/s) */
        free(y);
        free(one.data);
        free(streamed.data);
        free(x);
    }
    choir_err err;
    membuf m = {0};
    assert_null(choir_encoder_create(CHOIR_FORMAT_AAC, 23000, 1, mem_write, &m, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_null(choir_encoder_create(CHOIR_FORMAT_AAC, 24000, 7, mem_write, &m, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
}

static void test_sink_failure_and_args(void **state) {
    (void)state;
    const int64_t frames = 20000;
    float *x = signal(frames, 1, 24000);
    choir_err err;
    for (int f = 0; f < CHOIR_FORMAT_COUNT; f++) {
        membuf m = {.fail_at = 2};
        choir_encoder *e = choir_encoder_create((choir_audio_format)f, 24000, 1, mem_write, &m, &err);
        assert_non_null(e);
        int rc = 0;
        for (int i = 0; i < 20 && rc == 0; i++) rc = choir_encoder_write(e, x, frames, &err);
        if (rc == 0) rc = choir_encoder_finish(e, &err);
        assert_int_equal(rc, CHOIR_EIO);
        assert_int_equal(choir_encoder_write(e, x, 10, &err), CHOIR_EINVAL);
        choir_encoder_free(e);
        free(m.data);
    }
    membuf m = {0};
    assert_null(choir_encoder_create(CHOIR_FORMAT_MP3, 96000, 1, mem_write, &m, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_null(choir_encoder_create(CHOIR_FORMAT_WAV16, 24000, 0, mem_write, &m, &err));
    assert_null(choir_encoder_create(CHOIR_FORMAT_WAV16, 24000, 1, NULL, NULL, &err));
    assert_null(choir_encoder_create_file(CHOIR_FORMAT_WAV16, 24000, 1, "/nonexistent/dir/x.wav", &err));
    assert_int_equal(err.code, CHOIR_EIO);
    choir_encoder_free(NULL);
    choir_audio_format f;
    assert_int_equal(choir_audio_format_parse("mp3", &f, &err), 0);
    assert_int_equal(f, CHOIR_FORMAT_MP3);
    assert_int_equal(choir_audio_format_parse("wav", &f, &err), 0);
    assert_int_equal(f, CHOIR_FORMAT_WAV16);
    assert_int_equal(choir_audio_format_parse("aac", &f, &err), 0);
    assert_int_equal(f, CHOIR_FORMAT_AAC);
    assert_string_equal(choir_audio_format_mime(CHOIR_FORMAT_AAC), "audio/aac");
    assert_int_equal(choir_audio_format_parse("m4a", &f, &err), CHOIR_EINVAL);
    assert_string_equal(choir_audio_format_mime(CHOIR_FORMAT_OPUS), "audio/ogg");
    assert_string_equal(choir_audio_format_name(CHOIR_FORMAT_PCM16), "pcm");
    /* Allocation failures during creation are reported, not crashed on. */
    for (int64_t i = 1; i < 4; i++) {
        choir_alloc_fail_after(i);
        choir_encoder *e = choir_encoder_create(CHOIR_FORMAT_MP3, 24000, 1, mem_write, &m, &err);
        choir_alloc_fail_after(0);
        if (e) {
            choir_encoder_free(e);
            break;
        }
        assert_int_equal(err.code, CHOIR_ENOMEM);
    }
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aac_decodes_back),
        cmocka_unit_test(test_wav_and_pcm_exact),         cmocka_unit_test(test_wav_files),
        cmocka_unit_test(test_flac_lossless),             cmocka_unit_test(test_mp3_streams_without_seams),
        cmocka_unit_test(test_opus_streams_without_seams), cmocka_unit_test(test_sink_failure_and_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
