#include "testutil.h"

#include "choir/randw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmpdir[512];

static void remove_tmpdir(void) {
    if (!g_tmpdir[0] || getenv("CHOIR_KEEP_TMP")) return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
}

const char *tu_fixture(const char *rel) {
    static char bufs[8][1024];
    static int slot;
    char *b = bufs[slot++ % 8];
    snprintf(b, 1024, "%s/fixtures/%s", CHOIR_SHARED_DIR, rel);
    return b;
}

const char *tu_tmpdir(void) {
    if (!g_tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/choir-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(g_tmpdir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(remove_tmpdir);
    }
    return g_tmpdir;
}

const char *tu_tmpfile(const char *name) {
    static char bufs[8][1024];
    static int slot;
    char *b = bufs[slot++ % 8];
    snprintf(b, 1024, "%s/%s", tu_tmpdir(), name);
    return b;
}

void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        x[i] = (float)(lo + (hi - lo) * u);
    }
}

double tu_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num) / (den > 1e-30 ? sqrt(den) : 1e-15);
}

double tu_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

void *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    fclose(f);
    return w == len ? 0 : -1;
}

int tu_kokoro_voice_dir(const char *dir) {
    char voices[1024], path[1100];
    snprintf(voices, sizeof voices, "%s/voices", dir);
    mkdir(voices, 0755);
    size_t len = 0;
    void *pack = tu_read_file(tu_fixture("kokoro/voices/af_heart.bin"), &len);
    snprintf(path, sizeof path, "%s/af_heart.bin", voices);
    int rc = pack ? tu_write_file(path, pack, len) : -1;
    free(pack);
    return rc;
}

int tu_sam_tiny_dir(const char *dir, choir_err *err) {
    char t5[4200], tok[4300];
    snprintf(t5, sizeof t5, "%s/t5", dir);
    if (choir_randw_write_checkpoint(tu_fixture("sam-audio/sam-tiny/manifest.json"),
                                     tu_fixture("sam-audio/sam-tiny/config.json"), dir, err) != 0 ||
        choir_randw_write_checkpoint(tu_fixture("sam-audio/sam-tiny/t5/manifest.json"),
                                     tu_fixture("sam-audio/sam-tiny/t5/config.json"), t5, err) != 0)
        return -1;
    size_t len = 0;
    void *j = tu_read_file(tu_fixture("sam-audio/sam-tiny/t5/tokenizer.json"), &len);
    snprintf(tok, sizeof tok, "%s/tokenizer.json", t5);
    int rc = j && tu_write_file(tok, j, len) == 0 ? 0 : -1;
    free(j);
    if (rc) choir_err_set(err, CHOIR_EIO, "could not copy the sam-tiny tokenizer to %s", tok);
    return rc;
}

int tu_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += r;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tu_copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}
