/* File helpers for the io layer: bounded whole-file reads and atomic writes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/io.h"

int choir_io_read_file(const char *path, size_t max_bytes, char **out, size_t *len, choir_err *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int code = errno == ENOENT ? CHOIR_ENOTFOUND : CHOIR_EIO;
        return choir_err_set(err, code, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    int rc = CHOIR_OK;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = choir_err_set(err, CHOIR_EIO, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "%s: %lld bytes, more than the %zu allowed", path,
                           (long long)sb.st_size, max_bytes);
        goto done;
    }
    size_t n = (size_t)sb.st_size;
    buf = choir_alloc(CHOIR_MEM_IO, n + 1);
    if (!buf) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
        goto done;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = choir_err_set(err, CHOIR_EIO, "%s: read failed after %zu bytes", path, got);
            goto done;
        }
        got += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
done:
    choir_free(buf);
    close(fd);
    return rc;
}

FILE *choir_io_tmp_open(const char *path, char *tmp_path, size_t cap, choir_err *err) {
    int n = snprintf(tmp_path, cap, "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= cap) {
        choir_err_set(err, CHOIR_EINVAL, "%s: path too long", path);
        return NULL;
    }
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        choir_err_set(err, CHOIR_EIO, "%s: cannot create a temporary file: %s", path, strerror(errno));
        return NULL;
    }
    /* mkstemp makes the file 0600; a checkpoint or config should get the usual
     * permissions the umask allows. */
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        choir_err_set(err, CHOIR_EIO, "%s: cannot open a stream: %s", path, strerror(errno));
        close(fd);
        unlink(tmp_path);
        return NULL;
    }
    return f;
}

int choir_io_tmp_commit(FILE *f, const char *tmp_path, const char *path, choir_err *err) {
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        unlink(tmp_path);
        return choir_err_set(err, CHOIR_EIO, "%s: write failed (disk full?)", path);
    }
    if (rename(tmp_path, path) != 0) {
        int e = errno;
        unlink(tmp_path);
        return choir_err_set(err, CHOIR_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return CHOIR_OK;
}

void choir_io_tmp_abort(FILE *f, const char *tmp_path) {
    if (f) fclose(f);
    unlink(tmp_path);
}

int choir_io_write_atomic(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                          choir_err *err) {
    char tmp[4096];
    FILE *f = choir_io_tmp_open(path, tmp, sizeof tmp, err);
    if (!f) return err ? err->code : CHOIR_EIO;
    if ((alen && fwrite(a, 1, alen, f) != alen) || (blen && fwrite(b, 1, blen, f) != blen)) {
        choir_io_tmp_abort(f, tmp);
        return choir_err_set(err, CHOIR_EIO, "%s: write failed (disk full?)", path);
    }
    return choir_io_tmp_commit(f, tmp, path, err);
}

int choir_io_make_dirs(const char *path, choir_err *err) {
    char dir[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof dir) return choir_err_set(err, CHOIR_EINVAL, "bad directory path '%s'", path);
    memcpy(dir, path, n + 1);
    /* Create each prefix ending before a '/', then the whole path. */
    for (size_t i = 1; i <= n; i++) {
        if (i < n && dir[i] != '/') continue;
        char saved = dir[i];
        dir[i] = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            dir[i] = saved;
            return choir_err_set(err, CHOIR_EIO, "%s: cannot create directory: %s", path, strerror(e));
        }
        dir[i] = saved;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return choir_err_set(err, CHOIR_EIO, "%s: exists and is not a directory", path);
    return CHOIR_OK;
}
