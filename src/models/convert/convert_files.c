/* File chores of the converter: making the output directory and copying the
 * source directory's non-checkpoint files (tokenizer, voices) alongside. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "models/convert/convert_internal.h"
#include "choir/io.h"

#define SIDE_FILE_MAX_BYTES (256ll << 20)

int convert_make_dir(const char *path, choir_err *err) { return choir_io_make_dirs(path, err); }

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Checkpoints and the files the converter writes itself. */
static int is_checkpoint_name(const char *name) {
    static const char *const exts[] = {".safetensors", ".safetensors.index.json", ".pth", ".bin",
                                       ".npz", ".onnx", ".ckpt", ".h5", ".msgpack", ".gguf"};
    if (strcmp(name, "config.json") == 0) return 1;
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++)
        if (ends_with(name, exts[i])) return 1;
    return 0;
}

static int copy_file(const char *src, const char *dst, choir_err *err) {
    FILE *in = fopen(src, "rb");
    if (!in) return choir_err_set(err, CHOIR_EIO, "%s: cannot read: %s", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        return choir_err_set(err, CHOIR_EIO, "%s: cannot write: %s", dst, strerror(errno));
    }
    char buf[65536];
    size_t got;
    int rc = 0;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, got, out) != got) {
            rc = choir_err_set(err, CHOIR_EIO, "%s: write failed", dst);
            break;
        }
    if (rc == 0 && ferror(in)) rc = choir_err_set(err, CHOIR_EIO, "%s: read failed", src);
    fclose(in);
    if (fclose(out) != 0 && rc == 0) rc = choir_err_set(err, CHOIR_EIO, "%s: write failed", dst);
    return rc;
}

static int copy_dir(const char *src_dir, const char *dst_dir, int depth, FILE *report,
                    choir_err *err) {
    DIR *d = opendir(src_dir);
    if (!d) return choir_err_set(err, CHOIR_EIO, "%s: cannot list: %s", src_dir, strerror(errno));
    int copied = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char from[4096], to[4096];
        if (snprintf(from, sizeof from, "%s/%s", src_dir, e->d_name) >= (int)sizeof from ||
            snprintf(to, sizeof to, "%s/%s", dst_dir, e->d_name) >= (int)sizeof to)
            continue;
        struct stat sb;
        if (stat(from, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth > 0) continue;
            if ((rc = convert_make_dir(to, err)) < 0) break;
            int n = copy_dir(from, to, depth + 1, report, err);
            if (n < 0) {
                rc = n;
                break;
            }
            copied += n;
            continue;
        }
        if (!S_ISREG(sb.st_mode) || sb.st_size > SIDE_FILE_MAX_BYTES) continue;
        if (depth == 0 && is_checkpoint_name(e->d_name)) continue;
        if ((rc = copy_file(from, to, err)) < 0) break;
        if (report) fprintf(report, "  copy      %s\n", from);
        copied++;
    }
    closedir(d);
    return rc < 0 ? rc : copied;
}

int convert_copy_side_files(const char *src_dir, const char *dst_dir, FILE *report,
                            choir_err *err) {
    return copy_dir(src_dir, dst_dir, 0, report, err);
}
