/* Ogg Vorbis header check (see ogg_guard.h). Follows the first logical
 * stream's pages, checking each page's CRC, until three packets have ended;
 * each must start with its Vorbis header type (1, 3, 5) and "vorbis". */
#include <stdint.h>
#include <string.h>

#include "audio/ogg_guard.h"

/* Ogg's CRC-32: polynomial 0x04c11db7, MSB first, initial 0, no final xor,
 * computed with the page's CRC field taken as zero. */
static uint32_t page_crc(const unsigned char *page, size_t len) {
    uint32_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char byte = (i >= 22 && i < 26) ? 0 : page[i];
        crc ^= (uint32_t)byte << 24;
        for (int b = 0; b < 8; b++) crc = (crc & 0x80000000u) ? (crc << 1) ^ 0x04c11db7u : crc << 1;
    }
    return crc;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

ogg_guard_verdict choir_ogg_vorbis_guard(const unsigned char *data, size_t len, int complete) {
    if (len < 28 + 7 || memcmp(data, "OggS", 4) != 0) return OGG_GUARD_PASS;
    unsigned n_segs0 = data[26];
    if (27 + n_segs0 + 7 > len || memcmp(data + 27 + n_segs0, "\x01vorbis", 7) != 0) return OGG_GUARD_PASS;
    const ogg_guard_verdict ran_out = complete ? OGG_GUARD_BROKEN : OGG_GUARD_UNSURE;
    uint32_t serial = le32(data + 14);
    int packets_done = 0, at_packet_start = 1;
    size_t pos = 0;
    while (packets_done < 3) {
        if (pos + 27 > len) return ran_out;
        if (memcmp(data + pos, "OggS", 4) != 0) return OGG_GUARD_BROKEN;
        unsigned n_segs = data[pos + 26];
        if (pos + 27 + n_segs > len) return ran_out;
        size_t body = 0;
        for (unsigned s = 0; s < n_segs; s++) body += data[pos + 27 + s];
        size_t page_len = 27 + n_segs + body;
        if (pos + page_len > len) return ran_out;
        if (page_crc(data + pos, page_len) != le32(data + pos + 22)) return OGG_GUARD_BROKEN;
        if (le32(data + pos + 14) == serial) {
            const unsigned char *seg = data + pos + 27 + n_segs;
            for (unsigned s = 0; s < n_segs && packets_done < 3; s++) {
                unsigned lace = data[pos + 27 + s];
                if (at_packet_start) {
                    static const unsigned char types[3] = {1, 3, 5};
                    if (lace < 7 || seg[0] != types[packets_done] || memcmp(seg + 1, "vorbis", 6) != 0)
                        return OGG_GUARD_BROKEN;
                    at_packet_start = 0;
                }
                seg += lace;
                if (lace < 255) {
                    packets_done++;
                    at_packet_start = 1;
                }
            }
        }
        pos += page_len;
    }
    return OGG_GUARD_PASS;
}
