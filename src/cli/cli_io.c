/* Input and output conveniences the commands share: "-" for standard input,
 * output formats from file names, output folders made on demand. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "cli/cli.h"

/* Standard input is read whole (audio codecs want to seek back and forth);
 * a pipe larger than this is refused rather than filling memory. */
#define STDIN_MAX_BYTES ((size_t)2 << 30)

int choir_cli_decode(const char *path, const choir_decode_opts *opts, choir_audio *out, choir_err *err)
{
    if (strcmp(path, "-") != 0)
        return choir_audio_decode_file(path, opts, out, err);
    choir_buf in = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    int rc = choir_buf_read(&in, stdin, STDIN_MAX_BYTES);
    if (rc == CHOIR_ETOOBIG)
        choir_err_set(err, rc, "standard input: more than %zu bytes", STDIN_MAX_BYTES);
    else if (rc == CHOIR_EIO)
        choir_err_set(err, rc, "standard input: %s", strerror(errno));
    else if (rc < 0)
        choir_err_set(err, rc, "standard input: out of memory");
    else if (in.len == 0)
        rc = choir_err_set(err, CHOIR_EINVAL, "standard input is empty (expected audio)");
    else
        rc = choir_audio_decode_memory(in.data, in.len, opts, out, err);
    choir_buf_free(&in);
    return rc;
}

const char *choir_cli_format_from_path(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot)
        return NULL;
    static const char *const known[][2] = {{".wav", "wav"}, {".mp3", "mp3"},  {".flac", "flac"}, {".opus", "opus"},
                                           {".ogg", "opus"}, {".aac", "aac"}, {".pcm", "pcm"},   {".raw", "pcm"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(dot, known[i][0]) == 0)
            return known[i][1];
    return NULL;
}

int choir_cli_make_dirs(const char *dir, choir_err *err)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return choir_err_set(err, CHOIR_EINVAL, "output folder name empty or too long");
    memcpy(path, dir, n + 1);
    /* each prefix that ends at a '/', then the whole path */
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != 0)
            continue;
        char keep = path[i];
        path[i] = 0;
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return choir_err_set(err, CHOIR_EIO, "%s: cannot create the folder: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return choir_err_set(err, CHOIR_EIO, "%s: exists and is not a folder", path);
        path[i] = keep;
    }
    return 0;
}

int choir_cli_spool_stdin(char *path, size_t cap, choir_err *err)
{
    const char *tmp = getenv("TMPDIR");
    int w = snprintf(path, cap, "%s/choir-stdin-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (w < 0 || (size_t)w >= cap) {
        path[0] = 0;
        return choir_err_set(err, CHOIR_EINVAL, "standard input: temporary folder name too long");
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        int e = errno;
        path[0] = 0;
        return choir_err_set(err, CHOIR_EIO, "standard input: cannot make a temporary file: %s", strerror(e));
    }
    char block[1 << 16];
    size_t total = 0, got;
    int rc = 0;
    while (rc == 0 && (got = fread(block, 1, sizeof block, stdin)) > 0) {
        total += got;
        for (size_t at = 0; at < got;) {
            ssize_t put = write(fd, block + at, got - at);
            if (put < 0) {
                rc = choir_err_set(err, CHOIR_EIO, "standard input: writing %s: %s", path, strerror(errno));
                break;
            }
            at += (size_t)put;
        }
    }
    if (rc == 0 && ferror(stdin))
        rc = choir_err_set(err, CHOIR_EIO, "standard input: %s", strerror(errno));
    if (rc == 0 && total == 0)
        rc = choir_err_set(err, CHOIR_EINVAL, "standard input is empty (expected audio)");
    if (close(fd) != 0 && rc == 0)
        rc = choir_err_set(err, CHOIR_EIO, "standard input: writing %s: %s", path, strerror(errno));
    return rc;
}
