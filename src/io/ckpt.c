/* One handle over either checkpoint reader, chosen by the file's first bytes. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/pth.h"
#include "choir/safetensors.h"

struct choir_ckpt {
    choir_st *st;
    choir_pth *pth;
};

/* A zip archive starts with a local file header. Directories and unreadable
 * paths go to the safetensors reader, which explains what is wrong with them. */
static int looks_like_zip(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    unsigned char magic[4] = {0};
    ssize_t n = read(fd, magic, sizeof magic);
    close(fd);
    return n == 4 && memcmp(magic, "PK\x03\x04", 4) == 0;
}

choir_ckpt *choir_ckpt_open(const char *path, choir_err *err) {
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "choir_ckpt_open: NULL path");
        return NULL;
    }
    choir_ckpt *ck = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *ck);
    if (!ck) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        return NULL;
    }
    if (looks_like_zip(path)) ck->pth = choir_pth_open_flags(path, CHOIR_PTH_NORMALIZE, err);
    else ck->st = choir_st_open(path, err);
    if (!ck->pth && !ck->st) {
        choir_free(ck);
        return NULL;
    }
    return ck;
}

void choir_ckpt_close(choir_ckpt *ck) {
    if (!ck) return;
    choir_st_close(ck->st);
    choir_pth_close(ck->pth);
    choir_free(ck);
}

int choir_ckpt_count(const choir_ckpt *ck) {
    if (!ck) return 0;
    return ck->pth ? choir_pth_count(ck->pth) : choir_st_count(ck->st);
}

const choir_st_tensor *choir_ckpt_at(const choir_ckpt *ck, int i) {
    if (!ck) return NULL;
    return ck->pth ? choir_pth_at(ck->pth, i) : choir_st_at(ck->st, i);
}

const choir_st_tensor *choir_ckpt_find(const choir_ckpt *ck, const char *name) {
    if (!ck) return NULL;
    return ck->pth ? choir_pth_find(ck->pth, name) : choir_st_find(ck->st, name);
}

int choir_ckpt_is_pth(const choir_ckpt *ck) { return ck && ck->pth; }
